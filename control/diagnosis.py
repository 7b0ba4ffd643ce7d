"""Classify a failed attempt: a failure class, one-sentence summary, a hint, and the log lines that matter.

The rules read the exit code, the signal, what the capsule or executor already knew, and the last
log lines. They are ordered from the most specific evidence to the least.

The log lines are written by the job, so reading them must cost bounded work whatever they hold:
`read_log` looks at the last MAX_TAIL_LINES lines, each cut to MAX_LINE_CHARS, with patterns that
never put an unbounded quantifier between two literals (a pattern like `image .* not present`
backtracks quadratically over a long line of "image image ..."). Callers run it before the database
transaction that ends the attempt, in a worker thread with a time limit (`read_log_in_worker`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from starforge_api.job.v1 import job_pb2
from starforge_api.job.v1 import job_state_pb2 as st

EXIT_INTEGRITY = 97
EXIT_NO_PYTHON = 98
EXIT_RUNNER_PRECHECK = 96
RETRYABLE = frozenset({st.FAILURE_CLASS_NODE_LOST, st.FAILURE_CLASS_INFRA, st.FAILURE_CLASS_PREEMPTED})

_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|MemoryError|Cannot allocate memory|oom-kill|Killed process", re.I
)
_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^'\n]{1,200})'")
_DATA = re.compile(
    r"(FileNotFoundError|No such file or directory|DatasetNotFoundError|ArrowInvalid|ParquetError|"
    r"pyarrow\.lib\.|EmptyDataError|UnicodeDecodeError)[^\n]{0,200}",
    re.I,
)
# An image reference has no spaces and is at most 255 characters: `image <ref> [is ]not present`.
_IMAGE = re.compile(
    r"exec format error|image \"?[^\s\"]{1,256}\"? (?:is )?not present|manifest unknown|pull access denied", re.I
)
# A missing file as the shell, Python or a loader reports it.
_MISSING_MARKS = ("No such file or directory", "can't open file", "FileNotFoundError", "not found")
# How much of the job's provenance the untracked-file rule reads (the spec came from the user).
MAX_UNTRACKED_CHECKED = 1000
MAX_MISSING_LINE_CHARS = 1000
# A hint the runner sends with a failed check is the job's text: shown, never longer than this.
MAX_HINT_CHARS = 1000
MAX_TAIL_LINES = 200
MAX_LINE_CHARS = 16384
log = logging.getLogger("starforge.diagnosis")
_WORKERS = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="diagnosis")

HINTS: dict[int, str] = {
    st.FAILURE_CLASS_USER_CODE: "The training command failed: read the last lines above, fix the code, and "
    "resubmit (or `sf job retry` once fixed in the image).",
    st.FAILURE_CLASS_OUT_OF_MEMORY: "Reduce the batch size or sequence length, enable gradient checkpointing, "
    "or ask for more GPUs (--profile) so memory is split further.",
    st.FAILURE_CLASS_IMAGE: "Check --image: it must exist on the nodes (or in an allowlisted registry) and "
    "contain python3.",
    st.FAILURE_CLASS_DATA: "Check --train-data / --validation-data and dataset paths: the file must be in the "
    "workspace or the dataset, in the format the method expects.",
    st.FAILURE_CLASS_NODE_LOST: "The node stopped answering. StarForge retries on another node within the "
    "job's retry budget.",
    st.FAILURE_CLASS_PRECHECK: "A check before training failed; nothing ran. Read the message, fix the lab, "
    "and submit again.",
    st.FAILURE_CLASS_INFRA: "The platform or backend failed, not your code. StarForge retries within the "
    "job's retry budget; tell your admins if it keeps happening.",
    st.FAILURE_CLASS_PREEMPTED: "The backend preempted the job. It is retried from its latest checkpoint.",
}


def _relevant(lines: Sequence[str], limit: int = 20) -> list[str]:
    tail = [ln for ln in lines if ln.strip()][-limit:]
    return tail


@dataclass(frozen=True)
class LogEvidence:
    """What the rules found in an attempt's last log lines."""

    integrity: str = ""  # bootstrap.sh's integrity-failure line
    image: bool = False
    oom: bool = False
    killed: bool = False
    data: str = ""  # the data error as printed
    module: str = ""  # the missing Python module
    tail: tuple[str, ...] = ()  # the lines a user reads in the diagnosis


def read_log(lines: Sequence[str]) -> LogEvidence:
    """Evidence from the last MAX_TAIL_LINES of `lines`, each read up to MAX_LINE_CHARS."""
    bounded = [ln[:MAX_LINE_CHARS] for ln in lines[-MAX_TAIL_LINES:]]
    text = "\n".join(bounded)
    data = _DATA.search(text)
    module = _MODULE.search(text)
    return LogEvidence(
        integrity=next((ln for ln in reversed(bounded) if "integrity check failed" in ln), ""),
        image=_IMAGE.search(text) is not None,
        oom=_OOM.search(text) is not None,
        killed="Killed" in text,
        data=data.group(0)[:200] if data else "",
        module=module.group(1) if module else "",
        tail=tuple(_relevant(bounded)),
    )


async def read_log_in_worker(lines: Sequence[str], timeout: float) -> LogEvidence:
    """`read_log` in a worker thread, off the event loop and outside any transaction; an empty
    LogEvidence (the exit code alone decides) when it takes longer than `timeout` seconds."""
    if not lines:
        return LogEvidence()
    work = asyncio.get_running_loop().run_in_executor(_WORKERS, read_log, list(lines))
    try:
        return await asyncio.wait_for(work, timeout)
    except TimeoutError:
        log.warning("diagnosis: reading %d log lines took over %.1f s; classified by exit code", len(lines), timeout)
        return LogEvidence(tail=tuple(ln[:MAX_LINE_CHARS] for ln in lines[-20:]))


def missing_untracked(lines: Sequence[str], untracked: Sequence[str]) -> str:
    """The first untracked (so not packed) lab file that a missing-file error in `lines` names, by
    its lab path or, failing that, its file name; "" when none does. Bounded work: at most
    MAX_UNTRACKED_CHECKED names against the first MAX_MISSING_LINE_CHARS of each error line."""
    errors = [ln[:MAX_MISSING_LINE_CHARS] for ln in lines if any(m in ln for m in _MISSING_MARKS)]
    if not errors:
        return ""
    names = [u for u in untracked[:MAX_UNTRACKED_CHECKED] if 0 < len(u) <= MAX_MISSING_LINE_CHARS]
    for line in reversed(errors):
        for u in names:
            if u in line:
                return u
        for u in names:
            base = u.rsplit("/", 1)[-1]
            if len(base) >= 3 and any(f"{sep}{base}" in line for sep in ("/", " ", "'", '"', "`")):
                return u
    return ""


def untracked_module(module: str, untracked: Sequence[str]) -> str:
    """The untracked lab file that would have provided Python module `module` ("" when none)."""
    path = module.replace(".", "/")
    for u in untracked[:MAX_UNTRACKED_CHECKED]:
        if u == f"{path}.py" or u.endswith((f"/{path}.py", f"/{path}/__init__.py")) or u == f"{path}/__init__.py":
            return u
    return ""


def untracked_hint(path: str) -> str:
    return (
        f"sf packs only the files git tracks: `git add {path}`, commit, and submit again "
        "(`sf job status` lists the files a run left out as untracked)."
    )


def diagnose(
    *,
    exit_code: int | None,
    signal: int = 0,
    known_class: int = st.FAILURE_CLASS_UNSPECIFIED,
    message: str = "",
    log_tail: Sequence[str] = (),
    entrypoint: str = "the training command",
    evidence: LogEvidence | None = None,
    untracked: Sequence[str] = (),
    hint: str = "",
) -> job_pb2.Diagnosis:
    """A Diagnosis for a failed attempt, from `evidence` (read from `log_tail` when not given).

    `untracked`: the lab files the job's provenance lists as untracked, so not packed; when a
    missing-file error names one, that file is the diagnosis, not the training data. `hint`: the
    runner's own fix for a check it failed (bounded to MAX_HINT_CHARS), else the class's hint."""
    ev = evidence if evidence is not None else read_log(log_tail)
    cls = known_class
    summary = message
    unpacked = ""
    integrity = ev.integrity
    if exit_code == EXIT_INTEGRITY or integrity:
        # bootstrap.sh's own words are the best summary, whoever classified the failure.
        cls = cls or st.FAILURE_CLASS_PRECHECK
        summary = summary or integrity.split("starforge: ", 1)[-1] or "the capsule failed its integrity check"
    elif cls == st.FAILURE_CLASS_UNSPECIFIED:
        if exit_code == EXIT_NO_PYTHON:
            cls = st.FAILURE_CLASS_IMAGE
            summary = summary or "the image has no python3, which the capsule needs"
        elif exit_code == EXIT_RUNNER_PRECHECK:
            cls = st.FAILURE_CLASS_PRECHECK
        elif ev.image:
            cls = st.FAILURE_CLASS_IMAGE
        elif unpacked := missing_untracked(ev.tail, untracked) or untracked_module(ev.module, untracked):
            cls = st.FAILURE_CLASS_USER_CODE
            summary = summary or f"{entrypoint} needs {unpacked}, which git does not track, so it was not packed"
        elif ev.oom or (exit_code == 137 and signal in (0, 9) and ev.killed):
            cls = st.FAILURE_CLASS_OUT_OF_MEMORY
            summary = summary or "the training process ran out of memory"
        elif ev.data and not ev.module:
            cls = st.FAILURE_CLASS_DATA
            summary = summary or f"training data could not be read: {ev.data}"
        else:
            cls = st.FAILURE_CLASS_USER_CODE
    if not summary:
        if signal:
            summary = f"{entrypoint} was killed by signal {signal}"
        elif exit_code is not None:
            summary = f"{entrypoint} exited with code {exit_code}"
        else:
            summary = "the attempt failed"
    given = hint[:MAX_HINT_CHARS]
    hint = given or (untracked_hint(unpacked) if unpacked else HINTS.get(cls, ""))
    if ev.module and not unpacked and not given and cls == st.FAILURE_CLASS_USER_CODE:
        hint = (
            f"Python module {ev.module!r} is missing from the image: install it in the image or pick one that has it."
        )
    d = job_pb2.Diagnosis(
        failure_class=cls,  # type: ignore[arg-type]
        summary=summary,
        hint=hint,
        log_tail=list(ev.tail),
        retryable=cls in RETRYABLE,
    )
    if exit_code is not None:
        d.exit_code = exit_code
    return d
