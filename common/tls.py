"""TLS for every StarForge port and channel: credentials from PEM files and the loopback rule.

Every component's configuration has a `tls:` section (`TlsConfig`). The serving keys
(`cert_file`, `key_file`, `client_ca_file`) turn the component's listening ports into TLS (and
mutual TLS with a client CA); the dialing keys (`ca_file`, `client_cert_file`, `client_key_file`)
turn every channel it opens into TLS that verifies the server (and presents a client certificate).

Tokens and secrets cross these connections, so plaintext is allowed only where nobody else can
listen: on loopback addresses, or where the operator says so with `tls.plaintext: true`
(`check_listen`, `check_dial`). Anything else is refused at start with one ConfigError.
"""

from __future__ import annotations

import dataclasses
import ssl
from pathlib import Path

import grpc

from common.addresses import LOOPBACK_NAMES, host_of, is_loopback
from common.config import ConfigError

__all__ = ["LOOPBACK_NAMES", "TlsConfig", "host_of", "is_loopback"]


@dataclasses.dataclass(frozen=True)
class TlsConfig:
    """The `tls:` section of a component's configuration (docs/security.md)."""

    # PEM certificate chain and private key this component serves with; both or neither.
    cert_file: str = ""
    key_file: str = ""
    # PEM CA bundle: when set, the served port requires client certificates it signed (mutual TLS).
    client_ca_file: str = ""
    # PEM CA bundle verifying the servers this component dials; when set, every channel uses TLS.
    ca_file: str = ""
    # PEM certificate chain and key presented to servers that require one (mutual TLS).
    client_cert_file: str = ""
    client_key_file: str = ""
    # Serve and dial plaintext on non-loopback addresses anyway (a network nobody else can read).
    plaintext: bool = False

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ConfigError("tls.cert_file and tls.key_file: set both (the certificate and its key) or neither")
        if bool(self.client_cert_file) != bool(self.client_key_file):
            raise ConfigError("tls.client_cert_file and tls.client_key_file: set both or neither")
        if self.client_ca_file and not self.cert_file:
            raise ConfigError("tls.client_ca_file: mutual TLS needs the server's own tls.cert_file and tls.key_file")
        if self.client_cert_file and not self.ca_file:
            raise ConfigError("tls.client_cert_file: a client certificate is sent over TLS only; set tls.ca_file")

    @property
    def serving(self) -> bool:
        """Whether this component's ports serve TLS."""
        return bool(self.cert_file)

    @property
    def dialing(self) -> bool:
        """Whether the channels this component opens use TLS."""
        return bool(self.ca_file)


def check_listen(address: str, tls: TlsConfig, key: str) -> None:
    """Refuse to serve plaintext on a non-loopback `address` (config key `key`) unless told to."""
    if tls.serving or tls.plaintext or is_loopback(address):
        return
    raise ConfigError(
        f"{key}: {address} is not a loopback address and TLS is off, so tokens would cross the network "
        "in plain text; set tls.cert_file and tls.key_file, listen on 127.0.0.1, or set "
        "tls.plaintext: true for a network nobody else can read"
    )


def check_dial(address: str, tls: TlsConfig, key: str) -> None:
    """Refuse to send tokens in plaintext to a non-loopback `address` (config key `key`) unless told to."""
    if tls.dialing or tls.plaintext or is_loopback(address):
        return
    raise ConfigError(
        f"{key}: {address} is not a loopback address and TLS is off, so tokens would cross the network "
        "in plain text; set tls.ca_file (the CA that signed its certificate), or set "
        "tls.plaintext: true for a network nobody else can read"
    )


def mode(tls: TlsConfig) -> str:
    """What the served port speaks, for start-up log lines."""
    if not tls.serving:
        return "plaintext"
    return "mutual TLS" if tls.client_ca_file else "TLS"


def read_pem(path: str, key: str) -> bytes:
    """The bytes of a PEM file named by config key `key`; ConfigError when it cannot be read."""
    try:
        data = Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc.strerror}") from None
    if b"-----BEGIN " not in data:
        raise ConfigError(f"{key}: {path} is not a PEM file (no -----BEGIN line)")
    return data


def server_credentials(tls: TlsConfig) -> grpc.ServerCredentials | None:
    """gRPC server credentials for `tls` (None: plaintext); mutual TLS when client_ca_file is set."""
    if not tls.serving:
        return None
    pair = (read_pem(tls.key_file, "tls.key_file"), read_pem(tls.cert_file, "tls.cert_file"))
    client_ca = read_pem(tls.client_ca_file, "tls.client_ca_file") if tls.client_ca_file else None
    return grpc.ssl_server_credentials([pair], root_certificates=client_ca, require_client_auth=client_ca is not None)


def channel_credentials(tls: TlsConfig) -> grpc.ChannelCredentials | None:
    """gRPC channel credentials for `tls` (None: plaintext), with the client certificate when set."""
    if not tls.dialing:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=read_pem(tls.ca_file, "tls.ca_file"),
        private_key=read_pem(tls.client_key_file, "tls.client_key_file") if tls.client_key_file else None,
        certificate_chain=read_pem(tls.client_cert_file, "tls.client_cert_file") if tls.client_cert_file else None,
    )


def ca_credentials(ca_pem: str) -> grpc.ChannelCredentials | None:
    """Channel credentials trusting the CA PEM a LaunchRequest carries (None when empty: plaintext)."""
    return grpc.ssl_channel_credentials(root_certificates=ca_pem.encode()) if ca_pem else None


def job_ca_pem(tls: TlsConfig) -> str:
    """The CA PEM jobs and executors get to verify the control plane ("" when it serves plaintext)."""
    if not tls.serving:
        return ""
    if not tls.ca_file:
        raise ConfigError(
            "tls.ca_file: required with tls.cert_file; jobs and executors verify this control plane with it"
        )
    return read_pem(tls.ca_file, "tls.ca_file").decode()


def server_ssl_context(tls: TlsConfig) -> ssl.SSLContext | None:
    """An ssl context for an HTTP port (None: plaintext); client certificates as for gRPC."""
    if not tls.serving:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(Path(tls.cert_file).expanduser(), Path(tls.key_file).expanduser())
        if tls.client_ca_file:
            ctx.load_verify_locations(Path(tls.client_ca_file).expanduser())
            ctx.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"tls: cannot load the certificate, key or client CA: {exc}") from None
    return ctx
