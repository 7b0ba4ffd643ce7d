"""Rich renderings of jobs and metrics (tables and panels for text mode)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from starforge_api.job.v1 import artifact_pb2, job_pb2, job_spec_pb2, job_state_pb2, telemetry_pb2

from cli.follow import state_name, state_style
from cli.output import human_bytes, sparkline, timestamp_text
from cli.tables import JOB_COLUMNS, JOB_WRAPS, job_row, wait_text


def _enum(value: int, enum: object, prefix: str) -> str:
    name: str = enum.Name(value)  # type: ignore[attr-defined]
    return name.removeprefix(prefix).lower().replace("_", " ")


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


def _short(digest: str) -> str:
    return digest.removeprefix("sha256:")[:16] if digest else "-"


def _kv(table: Table, key: str, value: str | Text) -> None:
    if value in ("", None):
        return
    table.add_row(Text(key, style="dim"), value)


def _pool_text(pool: job_spec_pb2.Pool) -> str:
    gpus = f"{pool.nodes}x{pool.gpus_per_node} GPU" if pool.gpus_per_node else f"{pool.nodes} node(s)"
    return f"{pool.name or 'main'}: {pool.series} {gpus} ({pool.profile})"


def last_exit_code(job: job_pb2.Job) -> int | None:
    """Exit code of the last attempt that reported one (the diagnosis' when it has one)."""
    for attempt in reversed(job.attempts):
        if attempt.HasField("exit_code"):
            code: int = attempt.exit_code
            return code
    if job.HasField("diagnosis") and job.diagnosis.HasField("exit_code"):
        code = job.diagnosis.exit_code
        return code
    return None


def image_text(job: job_pb2.Job) -> str:
    """The image, and for "host" what it means (no container)."""
    if job.image == "host":
        return "host (no container: the fleet's own environment)"
    return job.image


def image_source_text(job: job_pb2.Job) -> str:
    """Where the image came from: "<source>: <detail>" (empty for jobs admitted before it was recorded)."""
    if not job.image_source:
        return ""
    name = _enum(job.image_source, job_pb2.ImageSource, "IMAGE_SOURCE_")
    return f"{name}: {job.image_source_detail}" if job.image_source_detail else name


def runtime_text(job: job_pb2.Job) -> str:
    if not job.framework_version:
        return ""
    return job.framework_version + (f" (runtime {job.runtime_id})" if job.runtime_id else "")


def tracker_text(o: job_spec_pb2.Observability) -> str:
    """External observability: the tracker URL and tool ("" in platform mode)."""
    if o.mode != job_spec_pb2.OBSERVABILITY_MODE_EXTERNAL or not o.url:
        return ""
    return f"{o.url} ({o.tool})" if o.tool else o.url


def job_panel(job: job_pb2.Job) -> RenderableType:
    """`sf job status`: everything about one job."""
    head = Table.grid(padding=(0, 2))
    head.add_column(no_wrap=True)
    head.add_column()
    _kv(head, "state", state_text(job.state))
    _kv(head, "waiting", wait_text(job))
    _kv(head, "owner", job.owner)
    _kv(head, "project", job.project)
    _kv(head, "experiment", job.experiment + (f" (stage {job.stage} of {job.parent_job_id})" if job.stage else ""))
    _kv(head, "method", job.method)
    _kv(head, "pools", ", ".join(_pool_text(p) for p in job.pools))
    _kv(head, "image", image_text(job))
    _kv(head, "image from", image_source_text(job))
    _kv(head, "framework", runtime_text(job))
    _kv(head, "fleet", job.fleet)
    _kv(head, "tracker", tracker_text(job.spec.observability))
    _kv(head, "created", timestamp_text(job.create_time))
    if job.HasField("start_time"):
        _kv(head, "started", timestamp_text(job.start_time))
    if job.HasField("end_time"):
        _kv(head, "ended", timestamp_text(job.end_time))
    code = last_exit_code(job)
    if code is not None:
        _kv(head, "exit", f"exit code {code}")
    if job.retry_budget:
        _kv(head, "retries", f"{job.retries_used} of {job.retry_budget} used")
    _kv(head, "out dir", job.out_dir)
    for warning in job.warnings:
        _kv(head, "warning", Text(warning, style="yellow"))
    parts: list[RenderableType] = [head]
    if job.HasField("diagnosis"):
        parts.append(_diagnosis(job.diagnosis))
    if job.attempts:
        parts.append(_attempts(job.attempts))
    if job.HasField("provenance"):
        parts.append(_provenance(job.provenance))
    title = Text.assemble(("job ", "bold"), (job.job_id, "bold"), "  ", state_text(job.state))
    return Panel(Group(*parts), title=title, title_align="left", expand=False)


def _diagnosis(d: job_pb2.Diagnosis) -> RenderableType:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column()
    _kv(grid, "class", _enum(d.failure_class, job_state_pb2.FailureClass, "FAILURE_CLASS_"))
    _kv(grid, "summary", d.summary)
    _kv(grid, "hint", d.hint)
    if d.retryable:
        _kv(grid, "retry", "retried automatically")
    parts: list[RenderableType] = [Text("\ndiagnosis", style="bold red"), grid]
    if d.log_tail:
        parts.append(Text("last log lines:", style="dim"))
        parts.append(Text("\n".join(f"  {line}" for line in d.log_tail)))
    return Group(*parts)


def _attempts(attempts: Sequence[job_pb2.Attempt]) -> RenderableType:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for col in ("#", "STATE", "CAUSE", "FLEET", "HANDLE", "NODE", "EXIT", "REASON"):
        table.add_column(col, overflow="fold")
    for a in attempts:
        table.add_row(
            str(a.number),
            state_text(a.state),
            _enum(a.cause, job_pb2.AttemptCause, "ATTEMPT_CAUSE_"),
            a.fleet + (f" ({a.executor_kind})" if a.executor_kind else ""),
            a.backend_handle or "-",
            a.node or "-",
            str(a.exit_code) if a.HasField("exit_code") else "-",
            a.reason,
        )
    return Group(Text("\nattempts", style="bold"), table)


def _provenance(p: job_spec_pb2.Provenance) -> RenderableType:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True)
    grid.add_column()
    commit = p.git_commit[:12] + (" (dirty)" if p.git_dirty else "") if p.git_commit else "-"
    _kv(grid, "git", commit + (f" on {p.git_branch}" if p.git_branch else ""))
    if p.untracked_files:
        shown = ", ".join(p.untracked_files[:5]) + (" ..." if len(p.untracked_files) > 5 else "")
        _kv(grid, "untracked", f"{len(p.untracked_files)} file(s) not packed: {shown}")
    snapshot = hashlib.sha256(p.config_snapshot.encode()).hexdigest() if p.config_snapshot else ""
    _kv(grid, "config", _short(snapshot))
    _kv(grid, "recipe", _short(p.recipe_digest))
    _kv(grid, "runner", _short(p.runner_digest))
    _kv(grid, "capsule", _short(p.capsule_digest))
    _kv(grid, "image", _short(p.image_digest))
    _kv(grid, "client", " ".join(x for x in (p.client_version and f"sf {p.client_version}", p.client_host) if x))
    return Group(Text("\nprovenance", style="bold"), grid)


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
