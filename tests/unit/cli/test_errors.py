"""Every status code becomes one message and the documented exit code."""

from __future__ import annotations

import json

import grpc
import pytest

from cli.errors import (
    EXIT_AUTH,
    EXIT_FAILURE,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    CliError,
    from_rpc,
    usage,
)
from cli.output import print_error
from common import errors
from tests.unit.cli.fakes import FakeRpcError

ADDR = "10.0.0.5:7070"


@pytest.mark.parametrize(
    ("err", "exit_code"),
    [
        (errors.InvalidArgument("bad"), EXIT_REFUSED),
        (errors.FailedPrecondition("stale"), EXIT_REFUSED),
        (errors.NotFound("gone"), EXIT_REFUSED),
        (errors.PermissionDenied("no"), EXIT_REFUSED),
        (errors.AlreadyExists("dup"), EXIT_REFUSED),
        (errors.Unauthenticated("bad token"), EXIT_AUTH),
        (errors.Internal("boom (incident 1234)"), EXIT_FAILURE),
        (errors.ResourceExhausted("busy"), EXIT_FAILURE),
        (errors.Unavailable("executor down"), EXIT_FAILURE),  # sent by a server: not "unreachable"
    ],
)
def test_server_errors_map_to_exit_codes(err: errors.StarforgeError, exit_code: int) -> None:
    cli_err = from_rpc(FakeRpcError.from_error(err), ADDR)
    assert cli_err.exit_code == exit_code
    assert cli_err.code == err.code.name
    assert err.message in cli_err.message


def test_unauthenticated_says_how_to_fix() -> None:
    cli_err = from_rpc(FakeRpcError.from_error(errors.Unauthenticated("token revoked")), ADDR)
    assert cli_err.message.startswith("the console rejected your token; run `sf login`")
    assert cli_err.reason == "BAD_TOKEN"


def test_transport_unavailable_is_unreachable() -> None:
    raw = FakeRpcError(
        grpc.StatusCode.UNAVAILABLE,
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.5:7070: Failed to connect to "
        "remote host: Connection refused",
    )
    cli_err = from_rpc(raw, ADDR)
    assert cli_err.exit_code == EXIT_UNREACHABLE
    assert cli_err.message == (
        "cannot reach the console at 10.0.0.5:7070: Connection refused; is it running? start one with `sf up`"
    )


def test_deadline_before_connect_is_unreachable_after_is_slow() -> None:
    raw = FakeRpcError(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
    assert from_rpc(raw, ADDR, connected=False).exit_code == EXIT_UNREACHABLE
    slow = from_rpc(raw, ADDR, connected=True)
    assert slow.exit_code == EXIT_FAILURE
    assert "did not answer in time" in slow.message


def test_unimplemented_explains_version_skew() -> None:
    cli_err = from_rpc(FakeRpcError(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!"), ADDR)
    assert cli_err.exit_code == EXIT_FAILURE
    assert "does not support this call" in cli_err.message


def test_rich_details_become_bullets() -> None:
    err = errors.InvalidArgument(
        "2 overrides are wrong",
        reason=7,  # BAD_OVERRIDE
        field_violations=(
            errors.FieldViolation("overrides[0].key", "unknown parameter grpo.kl_cof; did you mean grpo.kl_coef?"),
            errors.FieldViolation("overrides[1].value", "must be <= 1"),
        ),
    )
    cli_err = from_rpc(FakeRpcError.from_error(err), ADDR)
    assert cli_err.reason == "BAD_OVERRIDE"
    assert cli_err.details == [
        "overrides[0].key: unknown parameter grpo.kl_cof; did you mean grpo.kl_coef?",
        "overrides[1].value: must be <= 1",
    ]


def test_precondition_and_quota_details() -> None:
    pre = errors.FailedPrecondition(
        "recipe.lock.json is stale",
        reason=5,
        precondition_violations=(
            errors.PreconditionViolation("RECIPE_LOCK", "experiments/x/recipe.lock.json", "run `sf recipe upgrade x`"),
        ),
    )
    cli_err = from_rpc(FakeRpcError.from_error(pre), ADDR)
    assert cli_err.details == ["experiments/x/recipe.lock.json: run `sf recipe upgrade x`"]
    assert cli_err.reason == "STALE_RECIPE_LOCK"
    quota = errors.ResourceExhausted(
        "over quota", quota_violations=(errors.QuotaViolation("@alice/h200", "8 of 8 GPUs in use"),)
    )
    assert from_rpc(FakeRpcError.from_error(quota), ADDR).details == ["@alice/h200: 8 of 8 GPUs in use"]


def test_print_error_text(capsys: pytest.CaptureFixture[str]) -> None:
    print_error(CliError("it broke [badly]", details=["one", "two"], hint="do this"), as_json=False)
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0] == "error: it broke [badly]"  # never interpreted as rich markup
    assert lines[1:] == ["  • one", "  • two", "  hint: do this"]


def test_print_error_json(capsys: pytest.CaptureFixture[str]) -> None:
    err = from_rpc(
        FakeRpcError.from_error(errors.InvalidArgument("bad", field_violations=(errors.FieldViolation("f", "d"),))),
        ADDR,
    )
    print_error(err, as_json=True)
    doc = json.loads(capsys.readouterr().err)
    assert doc["error"]["code"] == "INVALID_ARGUMENT"
    assert doc["error"]["exit_code"] == EXIT_REFUSED
    assert doc["error"]["field_violations"] == [{"field": "f", "description": "d"}]


def test_usage_helper() -> None:
    err = usage("nope", hint="fix")
    assert err.exit_code == 2
    assert err.code == "USAGE"
    assert err.to_json()["error"]["hint"] == "fix"
