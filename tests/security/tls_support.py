"""Certificates and a TCP tap for the TLS tests.

`make_pki(dir)` makes, with the `openssl` command line, a test CA and a leaf certificate it signed
for 127.0.0.1/localhost (server and client use: every StarForge server and every client that must
present a certificate uses it), plus a second, unrelated CA with its own leaf: what an attacker
or a misconfigured client holds.

`Tap` is a TCP proxy in front of a port that keeps every byte crossing it in either direction,
so a test can assert what an eavesdropper on the network would read.
"""

from __future__ import annotations

import contextlib
import pathlib
import socket
import subprocess
import threading
from dataclasses import dataclass, field

DAYS = "2"
CURVE = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]


@dataclass(frozen=True)
class Leaf:
    cert: pathlib.Path
    key: pathlib.Path


@dataclass(frozen=True)
class Pki:
    ca: pathlib.Path
    leaf: Leaf
    rogue_ca: pathlib.Path
    rogue_leaf: Leaf


def _openssl(*args: str, cwd: pathlib.Path) -> None:
    r = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {r.stderr}")


def _ca(d: pathlib.Path, name: str) -> tuple[pathlib.Path, pathlib.Path]:
    crt, key = d / f"{name}.crt", d / f"{name}.key"
    _openssl(
        "req", "-x509", *CURVE, "-keyout", key.name, "-out", crt.name, "-days", DAYS, "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )  # fmt: skip
    return crt, key


def _leaf(d: pathlib.Path, name: str, ca: tuple[pathlib.Path, pathlib.Path]) -> Leaf:
    ext = d / f"{name}.ext"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\n"
    )
    _openssl("req", *CURVE, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", ca[0].name, "-CAkey", ca[1].name, "-CAcreateserial",
        "-out", f"{name}.crt", "-days", DAYS, "-extfile", ext.name,
        cwd=d,
    )  # fmt: skip
    return Leaf(d / f"{name}.crt", d / f"{name}.key")


def make_pki(d: pathlib.Path) -> Pki:
    """A test CA with a 127.0.0.1 leaf, and an unrelated rogue CA with its own leaf."""
    d.mkdir(parents=True, exist_ok=True)
    ca = _ca(d, "ca")
    rogue = _ca(d, "rogue-ca")
    return Pki(ca=ca[0], leaf=_leaf(d, "leaf", ca), rogue_ca=rogue[0], rogue_leaf=_leaf(d, "rogue-leaf", rogue))


@dataclass
class Tap:
    """A TCP proxy 127.0.0.1:<port> -> `target` recording everything that crosses it."""

    target: tuple[str, int]
    seen: bytearray = field(default_factory=bytearray)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: socket.socket = field(default_factory=socket.socket)

    def __post_init__(self) -> None:
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self._server.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                with self._lock:
                    self.seen.extend(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def bytes_seen(self) -> bytes:
        with self._lock:
            return bytes(self.seen)

    def close(self) -> None:
        self._server.close()
