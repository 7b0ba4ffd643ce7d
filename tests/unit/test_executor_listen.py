"""An executor service without a token is allowed only as `insecure: true` on loopback."""

from __future__ import annotations

import pytest

from common.config import ConfigError
from executor_svc.config import ServiceConfig, check_listen_security, is_loopback


@pytest.mark.parametrize(
    ("listen", "loopback"),
    [
        ("127.0.0.1:7071", True),
        ("127.0.0.2:0", True),
        ("[::1]:7071", True),
        ("localhost:7071", True),
        ("0.0.0.0:7071", False),
        ("[::]:7071", False),
        ("10.0.0.7:7071", False),
        ("gpu-07:7071", False),
    ],
)
def test_loopback_addresses(listen: str, loopback: bool) -> None:
    assert is_loopback(listen) is loopback


def test_a_token_or_insecure_on_loopback() -> None:
    check_listen_security(ServiceConfig(token="t"), "0.0.0.0:7071")
    check_listen_security(ServiceConfig(insecure=True), "127.0.0.1:0")
    with pytest.raises(ConfigError, match="token: required"):
        check_listen_security(ServiceConfig(), "127.0.0.1:0")
    with pytest.raises(ConfigError, match="only on a loopback listen address"):
        check_listen_security(ServiceConfig(insecure=True), "0.0.0.0:7071")
    with pytest.raises(ConfigError, match="not both"):
        ServiceConfig(token="t", insecure=True)
