"""Turn slurmrestd answers into StarForge's error tree (common.errors).

slurmrestd reports failures two ways: the HTTP status (401 no/malformed token, 511 a token
slurmctld refused, 404 unknown job, 422 a request it could not parse, 500 a refused submission)
and an `errors[]` array whose entries carry Slurm's own error number and text. The text is what
a user can act on ("Invalid partition name specified"), so every raised error quotes it, and the
error number decides the class: a bad request is InvalidArgument, an unreachable slurmctld is
Unavailable, a refused token is Unauthenticated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from common import errors
from executor_svc.slurm import api


def describe(entries: Sequence[Mapping[str, Any]]) -> str:
    """One line from slurmrestd's errors[] (or warnings[]): "error: description (slurm error N)"."""
    parts = []
    for entry in entries:
        short = str(entry.get("error") or "").strip()
        long = str(entry.get("description") or "").strip()
        text = short if not long or long == short else (f"{short}: {long}" if short else long)
        number = entry.get("error_number")
        parts.append(f"{text} (slurm error {number})" if number else text)
    return "; ".join(part for part in parts if part) or "no details given"


def _class_for(number: int, http_status: int) -> type[errors.StarforgeError]:
    if number == api.ERR_PROTOCOL_AUTHENTICATION or http_status in (401, 511):
        return errors.Unauthenticated
    if number == api.ERR_ACCESS_DENIED or http_status == 403:
        return errors.PermissionDenied
    if number == api.ERR_INVALID_JOB_ID:
        return errors.NotFound
    if 1000 <= number < 2000:  # communication with slurmctld / slurmd failed
        return errors.Unavailable
    if 2000 <= number < 3000 or 9000 <= number < 10000:  # request refused / not parseable
        return errors.InvalidArgument
    if number == 0 and http_status >= 500:
        return errors.Unavailable
    if number == 0 and http_status == 404:
        return errors.NotFound
    return errors.Internal


def error_for(
    *,
    base_url: str,
    what: str,
    http_status: int,
    entries: Sequence[Mapping[str, Any]] = (),
    body_text: str = "",
) -> errors.StarforgeError:
    """The StarForge error for a failed slurmrestd call `what` (e.g. "submit job 'train'")."""
    numbers = [int(entry.get("error_number") or 0) for entry in entries]
    first = next((n for n in numbers if n), 0)
    cls = _class_for(first, http_status)
    details = describe(entries) if entries else (body_text.strip()[:300] or "empty answer")
    message = f"slurmrestd at {base_url}: {what} failed: {details} (HTTP {http_status})"
    if cls is errors.Unauthenticated:
        message += (
            ". The executor's Slurm user or token was refused: a 401 means the token header is missing "
            "or malformed, a 511 that slurmctld rejected the token (wrong key, expired, or not this "
            "user's); mint a new one with `scontrol token username=<user> lifespan=<seconds>`"
        )
    metadata = {"http_status": str(http_status), "base_url": base_url}
    if first:
        metadata["slurm_error"] = str(first)
    return cls(message=message, metadata=metadata)
