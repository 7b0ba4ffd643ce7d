"""The authorization metadata: `<scheme> <token>` with the scheme case-insensitive."""

from __future__ import annotations

import pytest

from common.channel import bearer, token_from_metadata


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_the_scheme_is_case_insensitive(scheme: str) -> None:
    assert token_from_metadata((("authorization", f"{scheme} sf_pat_abc"),)) == "sf_pat_abc"


@pytest.mark.parametrize(
    "value", ["", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "sf_pat_abc", "Bearersf_pat_abc", "Token sf_pat_abc"]
)
def test_anything_else_is_no_token(value: str) -> None:
    assert token_from_metadata((("authorization", value),)) is None


def test_what_clients_send_is_read_back() -> None:
    assert token_from_metadata(bearer("t0k")) == "t0k"
    assert token_from_metadata((("x-other", "Bearer t0k"),)) is None


@pytest.mark.parametrize("header", ["Bearer t0k", "bearer t0k", "BEARER  t0k "])
def test_the_http_port_reads_the_same_header(header: str) -> None:
    from common.channel import token_from_authorization

    assert token_from_authorization(header) == "t0k"
    assert token_from_authorization(None) is None
