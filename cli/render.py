"""Rich renderings of jobs and metrics (tables and panels for text mode)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from starforge_api.job.v1 import artifact_pb2, job_pb2, telemetry_pb2

from cli import jobtext
from cli.follow import state_name, state_style
from cli.output import human_bytes, sparkline
from cli.tables import JOB_COLUMNS, JOB_WRAPS, job_row


def state_text(state: int) -> Text:
    return Text(state_name(state), style=state_style(state))


def jobs_table(jobs: Sequence[job_pb2.Job]) -> Table:
    """`sf job ls`: one row per job (cli.tables draws the same table without rich into a pipe)."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col, wraps in zip(JOB_COLUMNS, JOB_WRAPS, strict=True):
        table.add_column(col, no_wrap=not wraps, overflow="fold")
    state = JOB_COLUMNS.index("STATE")
    for job in jobs:
        # Text, not str: rich would read "exp [sft]" or a wait message as markup and drop the brackets
        cells = [Text(cell) for cell in job_row(job)]
        cells[state] = state_text(job.state)
        table.add_row(*cells)
    return table


def _grid(fields: Sequence[jobtext.Field]) -> Table:
    """`key  value` rows (a styled value as Text; the others as the str the panel always passed)."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column()
    for f in fields:
        grid.add_row(Text(f.key, style="dim"), Text(f.value, style=f.style) if f.style else f.value)
    return grid


def job_panel(job: job_pb2.Job) -> RenderableType:
    """`sf job status`: everything about one job (`cli.jobtext` has its fields and plain layout)."""
    parts: list[RenderableType] = [_grid(jobtext.head_fields(job))]
    if job.HasField("diagnosis"):
        parts.append(_diagnosis(job.diagnosis))
    if job.attempts:
        parts.append(_attempts(job.attempts))
    if job.HasField("provenance"):
        parts.append(Group(Text("\nprovenance", style="bold"), _grid(jobtext.provenance_fields(job.provenance))))
    title = Text.assemble(("job ", "bold"), (job.job_id, "bold"), "  ", state_text(job.state))
    return Panel(Group(*parts), title=title, title_align="left", expand=False)


def _diagnosis(d: job_pb2.Diagnosis) -> RenderableType:
    parts: list[RenderableType] = [Text("\ndiagnosis", style="bold red"), _grid(jobtext.diagnosis_fields(d))]
    if d.log_tail:
        parts.append(Text("last log lines:", style="dim"))
        parts.append(Text("\n".join(f"  {line}" for line in d.log_tail)))
    return Group(*parts)


def _attempts(attempts: Sequence[job_pb2.Attempt]) -> RenderableType:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in jobtext.ATTEMPT_COLUMNS:
        table.add_column(col, overflow="fold")
    for a, row in zip(attempts, jobtext.attempt_rows(attempts), strict=True):
        cells: list[str | Text] = list(row)
        cells[jobtext.ATTEMPT_STATE] = state_text(a.state)
        table.add_row(*cells)
    return Group(Text("\nattempts", style="bold"), table)


def metrics_table(series: Sequence[telemetry_pb2.MetricSeries]) -> Table:
    """`sf job metrics`: latest, min, max and a sparkline per series."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col, justify in (
        ("METRIC", "left"),
        ("STEP", "right"),
        ("LATEST", "right"),
        ("MIN", "right"),
        ("MAX", "right"),
        ("TREND", "left"),
    ):
        table.add_column(col, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for s in series:
        if not s.points:
            table.add_row(s.name, "-", "-", "-", "-", "")
            continue
        values = [p.value for p in s.points]
        last = s.points[-1]
        table.add_row(
            s.name,
            str(last.step),
            f"{last.value:.6g}",
            f"{min(values):.6g}",
            f"{max(values):.6g}",
            sparkline(values),
        )
    return table


def series_summary(s: telemetry_pb2.MetricSeries) -> dict[str, object]:
    """JSON form of one series' summary (with its points)."""
    values = [p.value for p in s.points]
    return {
        "name": s.name,
        "points": len(values),
        "last_step": s.points[-1].step if s.points else None,
        "latest": values[-1] if values else None,
        "min": min(values) if values else None,
        "max": max(values) if values else None,
    }


def compare_table(runs: Sequence[tuple[job_pb2.Job, Sequence[telemetry_pb2.MetricSeries]]]) -> Table:
    """`sf job compare`: one row per (metric, run): latest, min, max, trend, and what differed."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col, justify in (
        ("METRIC", "left"),
        ("RUN", "left"),
        ("STATE", "left"),
        ("STEP", "right"),
        ("LATEST", "right"),
        ("MIN", "right"),
        ("MAX", "right"),
        ("TREND", "left"),
        ("DIFFERS BY", "left"),
    ):
        table.add_column(col, justify=justify, no_wrap=col != "DIFFERS BY")  # type: ignore[arg-type]
    names = sorted({s.name for _, series in runs for s in series})
    for metric in names:
        for job, series in runs:
            s = next((x for x in series if x.name == metric), None)
            differs = " ".join(f"{o.key}={o.value}" for o in job.spec.overrides) or "-"
            if job.provenance.git_commit:
                differs += f" @{job.provenance.git_commit[:8]}"
            if s is None or not s.points:
                table.add_row(metric, job.job_id, state_name(job.state), "-", "-", "-", "-", "", differs)
                continue
            values = [p.value for p in s.points]
            table.add_row(
                metric,
                job.job_id,
                state_name(job.state),
                str(s.points[-1].step),
                f"{values[-1]:.6g}",
                f"{min(values):.6g}",
                f"{max(values):.6g}",
                sparkline(values, width=20),
                differs,
            )
    return table


def samples_table(samples: Sequence[telemetry_pb2.Sample], width: int) -> Table:
    """`sf job samples`: step, reward, prompt and completion (shortened to `width`)."""

    def short(text: str) -> str:
        flat = " ".join(text.split())
        return flat if len(flat) <= width else flat[: max(width - 1, 1)] + "…"

    table = Table(box=None, pad_edge=False, header_style="bold")
    for col, justify in (("STEP", "right"), ("REWARD", "right"), ("PROMPT", "left"), ("COMPLETION", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for s in samples:
        reward = f"{s.reward:.4g}" if s.HasField("reward") else "-"
        table.add_row(str(s.step), reward, short(s.prompt), short(s.completion))
    return table


def artifacts_table(found: Sequence[artifact_pb2.Artifact]) -> Table:
    """`sf job artifacts`: path, size, sha256 (a link shows its target instead)."""
    t = Table(box=None, pad_edge=False, header_style="bold")
    t.add_column("PATH", overflow="fold")
    t.add_column("SIZE", justify="right", no_wrap=True)
    t.add_column("SHA256", no_wrap=True, min_width=64)  # whole: it is what a user compares
    for a in found:
        if a.kind == artifact_pb2.ARTIFACT_KIND_SYMLINK:
            t.add_row(Text(a.path), "link", Text(f"-> {a.link_target}", style="dim"))
        else:
            t.add_row(Text(a.path), human_bytes(a.size), a.sha256)
    return t


def artifact_lines(found: Sequence[artifact_pb2.Artifact]) -> list[str]:
    """`sf job artifacts` into a pipe: "<sha256>  <bytes>  <path>" per file (as sha256sum, plus
    the size), "<link>  0  <path> -> <target>" per link; never folded."""
    return [
        f"{'link':<64}  0  {a.path} -> {a.link_target}"
        if a.kind == artifact_pb2.ARTIFACT_KIND_SYMLINK
        else f"{a.sha256}  {a.size}  {a.path}"
        for a in found
    ]
