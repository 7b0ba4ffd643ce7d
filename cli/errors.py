"""Every way `sf` can fail, as one exception type with an exit code.

Commands raise `CliError` (or let a `grpc.RpcError` escape from `cli.client`, which converts it
here); `cli.exits` prints it once (`cli.output.print_error`) and `sf` exits with its code. Nothing else
prints errors, so a failure is always one message on stderr and never a traceback.

Exit codes are part of the interface (scripts switch on them):

    0  success
    1  anything else (server error, job ended without SUCCEEDED, unexpected bug)
    2  bad usage or local validation (nothing was sent)
    3  the console refused the request (INVALID_ARGUMENT, FAILED_PRECONDITION, NOT_FOUND,
       PERMISSION_DENIED, ALREADY_EXISTS)
    4  the console rejected the token (UNAUTHENTICATED) or there is none
    5  the console cannot be reached
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # grpc is imported by the functions that read a failed call: `sf --version` needs none
    import grpc

    from common import errors as common_errors

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_AUTH = 4
EXIT_UNREACHABLE = 5
EXIT_INTERRUPTED = 130

_REFUSALS = frozenset({"INVALID_ARGUMENT", "FAILED_PRECONDITION", "NOT_FOUND", "PERMISSION_DENIED", "ALREADY_EXISTS"})


@dataclass
class CliError(Exception):
    """A failure to report: one sentence (with the fix), optional bullet lines, an exit code.

    `code` is the gRPC status name for server errors and "LOCAL" / "USAGE" otherwise; `reason`
    is the StarForge ErrorReason name when the server sent one. Both go into `--output json`.
    """

    message: str
    exit_code: int = EXIT_FAILURE
    details: list[str] = field(default_factory=list)
    hint: str | None = None
    code: str = "LOCAL"
    reason: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message

    def to_json(self) -> dict[str, Any]:
        """The `{"error": {...}}` object printed on stderr in JSON mode."""
        body: dict[str, Any] = {"message": self.message, "code": self.code, "exit_code": self.exit_code}
        if self.reason:
            body["reason"] = self.reason
        if self.details:
            body["details"] = list(self.details)
        if self.hint:
            body["hint"] = self.hint
        body.update(self.data)
        return {"error": body}


def usage(message: str, *, details: list[str] | None = None, hint: str | None = None) -> CliError:
    """A local validation or usage failure (exit 2): nothing was sent to the console."""
    return CliError(message, EXIT_USAGE, details or [], hint, code="USAGE")


def _is_transport_error(err: grpc.RpcError) -> bool:
    """True when no server produced this status (no google.rpc details in the trailers).

    A StarForge server always attaches `grpc-status-details-bin` (ErrorInfo at least), so an
    UNAVAILABLE without it comes from the client's own transport: the console is unreachable.
    """
    trailers: Any = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    return all(item[0] != "grpc-status-details-bin" for item in trailers or ())


def _short_transport_detail(details: str) -> str:
    """The useful tail of grpc's connect error ("Connection refused"), not its whole chain."""
    text = details.strip()
    for marker in ("last error: ", "Failed to connect to remote host: "):
        if marker in text:
            text = text.rsplit(marker, 1)[1]
    return text.rstrip(".") or "no answer"


def unreachable(address: str, detail: str) -> CliError:
    """The console at `address` cannot be reached (exit 5)."""
    return CliError(
        f"cannot reach the console at {address}: {detail}; is it running? start one with `sf up`",
        EXIT_UNREACHABLE,
        code="UNAVAILABLE",
        data={"console": address},
    )


# What grpc's transport says when the TLS handshake, not the network, failed.
_UNVERIFIED = ("CERTIFICATE_VERIFY_FAILED", "Peer name", "not in peer certificate")
_NOT_TLS = ("WRONG_VERSION_NUMBER",)


def tls_failure(err: grpc.RpcError, address: str, trust: str | None) -> CliError | None:
    """The one message for a TLS handshake that failed (exit 5), or None when it was not that.

    `trust` names what verifies the console ("ca_file /path" or "the system's CAs"); None when the
    client speaks plaintext.
    """
    if trust is None:
        return None
    details = (err.details() if hasattr(err, "details") else None) or ""
    if any(marker in details for marker in _UNVERIFIED):
        why = details.rsplit("CERTIFICATE_VERIFY_FAILED: ", 1)[-1].split(":", 1)[0].strip()
        return CliError(
            f"the console at {address} presented a TLS certificate that {trust} does not verify ({why}); "
            "nothing was sent",
            EXIT_UNREACHABLE,
            hint="set ca_file in your client config (or STARFORGE_CA_FILE) to the CA that signed the console's "
            "certificate; ask your admin for it",
            code="UNAVAILABLE",
            data={"console": address},
        )
    if any(marker in details for marker in _NOT_TLS):
        return CliError(
            f"the console at {address} does not speak TLS; nothing was sent",
            EXIT_UNREACHABLE,
            hint="check the console address, or remove `tls`/`ca_file` from your client config for a local console",
            code="UNAVAILABLE",
            data={"console": address},
        )
    return None


def from_rpc(err: grpc.RpcError, address: str, *, connected: bool = True) -> CliError:
    """Turn a failed call into the one message the user reads.

    `connected` says whether the channel ever reached READY: a DEADLINE_EXCEEDED before that is
    an unreachable console (exit 5), after it a slow one (exit 1).
    """
    import grpc

    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    raw_details = (err.details() if hasattr(err, "details") else None) or ""
    if code == grpc.StatusCode.UNAVAILABLE and _is_transport_error(err):
        return unreachable(address, _short_transport_detail(raw_details))
    if code == grpc.StatusCode.DEADLINE_EXCEEDED and not connected:
        return unreachable(address, "no answer before the deadline")
    if code == grpc.StatusCode.CANCELLED:
        return CliError("interrupted", EXIT_INTERRUPTED, code="CANCELLED")
    from common.rpc_status import from_rpc_error  # only a failed call needs the status decoder

    rich = from_rpc_error(err)
    reason = rich.reason_name if rich.reason else None
    if code == grpc.StatusCode.UNAUTHENTICATED:
        exit_code = EXIT_AUTH
        message = f"the console rejected your token; run `sf login` ({rich.message})"
    elif code.name in _REFUSALS:
        exit_code = EXIT_REFUSED
        message = rich.message
    elif code == grpc.StatusCode.UNIMPLEMENTED:
        exit_code = EXIT_FAILURE
        message = f"the console at {address} does not support this call ({rich.message}); is it older than sf?"
    elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
        exit_code = EXIT_FAILURE
        message = f"the console at {address} did not answer in time ({rich.message})"
    else:
        exit_code = EXIT_FAILURE
        message = rich.message
    return CliError(
        message,
        exit_code,
        details=violation_lines(rich),
        code=code.name,
        reason=reason if reason not in (None, "UNSPECIFIED") else None,
        data=_violation_data(rich),
    )


def violation_lines(err: common_errors.StarforgeError) -> list[str]:
    """One bullet line per google.rpc violation, in the order the server listed them."""
    # a violation that only repeats the message adds nothing to it
    lines = [
        f"{v.field}: {v.description}" if v.field else v.description
        for v in err.field_violations
        if v.description != err.message
    ]
    for p in err.precondition_violations:
        subject = f"{p.subject}: " if p.subject else ""
        lines.append(f"{subject}{p.description}")
    for q in err.quota_violations:
        subject = f"{q.subject}: " if q.subject else ""
        lines.append(f"{subject}{q.description}")
    if err.retry_after_seconds:
        # one decimal: a rate limit asks for fractions of a second, and "retry after 0 s" misleads
        lines.append(f"retry after {math.ceil(err.retry_after_seconds * 10) / 10:g} s")
    return lines


def _violation_data(err: common_errors.StarforgeError) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if err.metadata:
        data["metadata"] = dict(err.metadata)
    if err.field_violations:
        data["field_violations"] = [{"field": v.field, "description": v.description} for v in err.field_violations]
    if err.precondition_violations:
        data["precondition_violations"] = [
            {"type": v.type, "subject": v.subject, "description": v.description} for v in err.precondition_violations
        ]
    if err.quota_violations:
        data["quota_violations"] = [{"subject": v.subject, "description": v.description} for v in err.quota_violations]
    return data
