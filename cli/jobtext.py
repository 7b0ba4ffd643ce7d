"""What `sf job status` shows of a job, and its plain-text layout for a pipe (without rich).

The fields are computed here once: `cli.render.job_panel` draws them as a rich panel (a terminal,
colours), `status_text` as plain lines when stdout is not a terminal. Importing rich costs `sf job
status` ~40 ms of CPU (docs/benchmarks.md, **cli**), more than its call. `status_text` declines
(None: rich draws the panel) exactly where `sf job ls`'s plain table does (`cli.tables.plain_width`:
a terminal, FORCE_COLOR or TTY_COMPATIBLE set) and for text that is not printable ASCII (rich
removes control codes; a line break inside a value is kept, indented under the value).

The plain layout: a title line (`job <id>  <STATE>`), then one `key  value` line per field, the
keys padded to one column as in the panel; each further part (diagnosis, attempts, provenance)
after a blank line and its name; the attempts as `sf job ls`'s table, never wrapped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from starforge_api.job.v1 import job_pb2, job_spec_pb2, job_state_pb2

from cli.follow import state_name, state_style
from cli.output import timestamp_text
from cli.tables import plain_table, plain_width, printable, wait_text

ATTEMPT_COLUMNS = ("#", "STATE", "CAUSE", "FLEET", "HANDLE", "NODE", "EXIT", "REASON")
ATTEMPT_STATE = ATTEMPT_COLUMNS.index("STATE")
_NO_WRAP = 1 << 30  # plain_table's width for a table that is never wrapped


class Field(NamedTuple):
    """One `key  value` line; `style` is rich's (the panel's colours), "" for none."""

    key: str
    value: str
    style: str = ""


def enum_text(value: int, enum: object, prefix: str) -> str:
    """An enum value's name without `prefix`, lower case, spaces for underscores."""
    name: str = enum.Name(value)  # type: ignore[attr-defined]
    return name.removeprefix(prefix).lower().replace("_", " ")


def short_digest(digest: str) -> str:
    return digest.removeprefix("sha256:")[:16] if digest else "-"


def pool_text(pool: job_spec_pb2.Pool) -> str:
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
    name = enum_text(job.image_source, job_pb2.ImageSource, "IMAGE_SOURCE_")
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


def _fields(pairs: Sequence[tuple[str, str] | Field]) -> list[Field]:
    """The pairs with a value (the panel leaves out empty fields)."""
    return [Field(*p) for p in pairs if p[1]]


def head_fields(job: job_pb2.Job) -> list[Field]:
    """The job's own fields, in the panel's order."""
    pairs: list[tuple[str, str] | Field] = [
        Field("state", state_name(job.state), state_style(job.state)),
        ("waiting", wait_text(job)),
        ("owner", job.owner),
        ("project", job.project),
        ("experiment", job.experiment + (f" (stage {job.stage} of {job.parent_job_id})" if job.stage else "")),
        ("method", job.method),
        ("pools", ", ".join(pool_text(p) for p in job.pools)),
        ("image", image_text(job)),
        ("image from", image_source_text(job)),
        ("framework", runtime_text(job)),
        ("fleet", job.fleet),
        ("tracker", tracker_text(job.spec.observability)),
        ("created", timestamp_text(job.create_time)),
    ]
    if job.HasField("start_time"):
        pairs.append(("started", timestamp_text(job.start_time)))
    if job.HasField("end_time"):
        pairs.append(("ended", timestamp_text(job.end_time)))
    code = last_exit_code(job)
    if code is not None:
        pairs.append(("exit", f"exit code {code}"))
    if job.retry_budget:
        pairs.append(("retries", f"{job.retries_used} of {job.retry_budget} used"))
    pairs.append(("out dir", job.out_dir))
    pairs.extend(Field("warning", w, "yellow") for w in job.warnings)
    return _fields(pairs)


def diagnosis_fields(d: job_pb2.Diagnosis) -> list[Field]:
    """The diagnosis' fields (its last log lines are `d.log_tail`)."""
    pairs = [
        ("class", enum_text(d.failure_class, job_state_pb2.FailureClass, "FAILURE_CLASS_")),
        ("summary", d.summary),
        ("hint", d.hint),
        ("retry", "retried automatically" if d.retryable else ""),
    ]
    return _fields(pairs)


def attempt_rows(attempts: Sequence[job_pb2.Attempt]) -> list[list[str]]:
    """One row of ATTEMPT_COLUMNS per attempt."""
    return [
        [
            str(a.number),
            state_name(a.state),
            enum_text(a.cause, job_pb2.AttemptCause, "ATTEMPT_CAUSE_"),
            a.fleet + (f" ({a.executor_kind})" if a.executor_kind else ""),
            a.backend_handle or "-",
            a.node or "-",
            str(a.exit_code) if a.HasField("exit_code") else "-",
            a.reason,
        ]
        for a in attempts
    ]


def provenance_fields(p: job_spec_pb2.Provenance) -> list[Field]:
    """Where the job came from: commit, what was not packed, the digests, the client."""
    commit = p.git_commit[:12] + (" (dirty)" if p.git_dirty else "") if p.git_commit else "-"
    pairs = [("git", commit + (f" on {p.git_branch}" if p.git_branch else ""))]
    if p.untracked_files:
        shown = ", ".join(p.untracked_files[:5]) + (" ..." if len(p.untracked_files) > 5 else "")
        pairs.append(("untracked", f"{len(p.untracked_files)} file(s) not packed: {shown}"))
    snapshot = ""
    if p.config_snapshot:
        import hashlib  # here: its OpenSSL binding is a few ms of `sf job status`'s start otherwise

        snapshot = hashlib.sha256(p.config_snapshot.encode()).hexdigest()
    pairs += [
        ("config", short_digest(snapshot)),
        ("recipe", short_digest(p.recipe_digest)),
        ("runner", short_digest(p.runner_digest)),
        ("capsule", short_digest(p.capsule_digest)),
        ("image", short_digest(p.image_digest)),
        ("client", " ".join(x for x in (p.client_version and f"sf {p.client_version}", p.client_host) if x)),
    ]
    return _fields(pairs)


def _grid(fields: Sequence[Field]) -> list[str] | None:
    """`key  value` lines, the keys padded to one column; a value's line breaks indented under it."""
    if not fields:
        return []
    column = max(len(f.key) for f in fields) + 2
    out = []
    for f in fields:
        lines = f.value.split("\n")
        if not printable(f.key) or not all(printable(line) for line in lines):
            return None
        out.append(f"{f.key.ljust(column)}{lines[0]}".rstrip())
        out.extend(f"{' ' * column}{line}".rstrip() for line in lines[1:])
    return out


def status_lines(job: job_pb2.Job) -> list[str] | None:
    """`sf job status`'s plain layout (module docstring), None when a text is not printable ASCII."""
    parts: list[list[str] | None] = [[f"job {job.job_id}  {state_name(job.state)}"], _grid(head_fields(job))]
    if job.HasField("diagnosis"):
        d = job.diagnosis
        parts += [["", "diagnosis"], _grid(diagnosis_fields(d))]
        if d.log_tail:
            tail = [f"  {line}".rstrip() for line in d.log_tail]
            parts.append(["last log lines:", *tail] if all(printable(line) for line in tail) else None)
    if job.attempts:
        table = plain_table(ATTEMPT_COLUMNS, attempt_rows(job.attempts), [False] * len(ATTEMPT_COLUMNS), _NO_WRAP)
        parts.append(["", "attempts", *(line.rstrip() for line in table.splitlines())] if table is not None else None)
    if job.HasField("provenance"):
        parts += [["", "provenance"], _grid(provenance_fields(job.provenance))]
    if any(part is None for part in parts):
        return None
    return [line for part in parts if part is not None for line in part]


def status_text(job: job_pb2.Job) -> str | None:
    """`sf job status` for a pipe; None when rich must draw it (a terminal, or text not printable ASCII)."""
    if plain_width() is None:
        return None
    lines = status_lines(job)
    return None if lines is None else "".join(line + "\n" for line in lines)
