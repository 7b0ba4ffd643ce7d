"""Classify a failed attempt: a failure class, one-sentence summary, a hint, and the log lines that matter.

The rules read the exit code, the signal, what the capsule or executor already knew, and the last
log lines. They are ordered from the most specific evidence to the least.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from starforge.job.v1 import job_pb2
from starforge.job.v1 import job_state_pb2 as st

EXIT_INTEGRITY = 97
EXIT_NO_PYTHON = 98
EXIT_RUNNER_PRECHECK = 96
RETRYABLE = frozenset({st.FAILURE_CLASS_NODE_LOST, st.FAILURE_CLASS_INFRA, st.FAILURE_CLASS_PREEMPTED})

_OOM = re.compile(
    r"CUDA out of memory|OutOfMemoryError|MemoryError|Cannot allocate memory|oom-kill|Killed process", re.I
)
_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")
_DATA = re.compile(
    r"(FileNotFoundError|No such file or directory|DatasetNotFoundError|ArrowInvalid|ParquetError|"
    r"pyarrow\.lib\.|EmptyDataError|UnicodeDecodeError).*",
    re.I,
)
_IMAGE = re.compile(r"exec format error|image .* not present|manifest unknown|pull access denied", re.I)

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


def diagnose(
    *,
    exit_code: int | None,
    signal: int = 0,
    known_class: int = st.FAILURE_CLASS_UNSPECIFIED,
    message: str = "",
    log_tail: Sequence[str] = (),
    entrypoint: str = "the training command",
) -> job_pb2.Diagnosis:
    """A Diagnosis for a failed attempt."""
    text = "\n".join(log_tail[-200:])
    cls = known_class
    summary = message
    integrity = next((ln for ln in reversed(log_tail) if "integrity check failed" in ln), "")
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
        elif _IMAGE.search(text):
            cls = st.FAILURE_CLASS_IMAGE
        elif _OOM.search(text) or (exit_code == 137 and signal in (0, 9) and "Killed" in text):
            cls = st.FAILURE_CLASS_OUT_OF_MEMORY
            summary = summary or "the training process ran out of memory"
        elif _DATA.search(text) and not _MODULE.search(text):
            cls = st.FAILURE_CLASS_DATA
            m = _DATA.search(text)
            summary = summary or f"training data could not be read: {m.group(0)[:200] if m else ''}"
        else:
            cls = st.FAILURE_CLASS_USER_CODE
    if not summary:
        if signal:
            summary = f"{entrypoint} was killed by signal {signal}"
        elif exit_code is not None:
            summary = f"{entrypoint} exited with code {exit_code}"
        else:
            summary = "the attempt failed"
    hint = HINTS.get(cls, "")
    module = _MODULE.search(text)
    if module and cls == st.FAILURE_CLASS_USER_CODE:
        hint = (
            f"Python module {module.group(1)!r} is missing from the image: "
            "install it in the image or pick one that has it."
        )
    d = job_pb2.Diagnosis(
        failure_class=cls,  # type: ignore[arg-type]
        summary=summary,
        hint=hint,
        log_tail=_relevant(log_tail),
        retryable=cls in RETRYABLE,
    )
    if exit_code is not None:
        d.exit_code = exit_code
    return d
