"""The client config: which console `sf` talks to and the personal access token it sends.

Lookup order (later wins): the file, then `STARFORGE_CONSOLE` / `STARFORGE_TOKEN`, then the
global `--console` option. The file is `$STARFORGE_CLIENT_CONFIG`, else
`$XDG_CONFIG_HOME/starforge/config.yaml`, else `~/.config/starforge/config.yaml`. It holds a
secret, so it is written with mode 0600 (atomically, so a crash never leaves half a token).
The environment is a parameter so tests never touch os.environ.

TLS: `sf` speaks TLS to the console when the file has `tls: true` or `ca_file: PATH` (the CA that
signed the console's certificate; `STARFORGE_CA_FILE` overrides it), or the console address is
`grpcs://` or `https://`; without `ca_file` it trusts the system's CAs. Plaintext to a console that
is not on loopback sends the token readable by anyone on the path, so `sf` refuses it unless the
file says `insecure: true`.

Next to it, `consoles.yaml` maps the address of each console `sf up --detach` started to its
state directory, so that `sf down` stops the console the config names wherever it keeps its state.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cli.errors import usage

DEFAULT_CONSOLE = "127.0.0.1:7070"  # where `sf up` listens by default
KEYS = ("console", "token", "ca_file", "tls", "insecure")
STRING_KEYS = ("console", "token", "ca_file")
# Kept as they are when `sf login` or `sf up` rewrites the file.
TLS_KEYS = ("ca_file", "tls", "insecure")
TLS_SCHEMES = ("grpcs://", "https://")


@dataclass(frozen=True)
class ClientConfig:
    """The effective settings and where they came from (for messages)."""

    console: str
    token: str | None
    path: pathlib.Path
    console_from: str  # "file", "env", "flag" or "default"
    file_console: str | None = None
    file_token: str | None = None
    # TLS to the console (module docstring); ca_file None: the system's CAs.
    tls: bool = False
    ca_file: str | None = None
    # Plaintext to a console that is not on loopback is allowed.
    insecure: bool = False


def config_path(env: Mapping[str, str]) -> pathlib.Path:
    """Where the client config file lives for this environment."""
    explicit = env.get("STARFORGE_CLIENT_CONFIG")
    if explicit:
        return pathlib.Path(explicit).expanduser()
    base = env.get("XDG_CONFIG_HOME") or str(pathlib.Path(env.get("HOME", "~")) / ".config")
    return pathlib.Path(base).expanduser() / "starforge" / "config.yaml"


def read_file(path: pathlib.Path) -> dict[str, Any]:
    """The file's settings ({} when it does not exist); a malformed file is a usage error."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise usage(f"cannot read the client config {path}: {exc.strerror}") from None
    import yaml  # only when there is a file: `sf` started with STARFORGE_CONSOLE/TOKEN alone skips it

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise usage(f"{where}: the client config is not valid YAML", hint="fix it or run `sf login`") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise usage(f"{path}: the client config must be a mapping with keys {', '.join(KEYS)}")
    unknown = sorted(str(k) for k in data if k not in KEYS)
    if unknown:
        raise usage(f"{path}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(KEYS)}")
    out: dict[str, Any] = {}
    for key in KEYS:
        value = data.get(key)
        if value is None:
            continue
        if key in STRING_KEYS and not isinstance(value, str):
            raise usage(f"{path}: `{key}` must be a string")
        if key not in STRING_KEYS and not isinstance(value, bool):
            raise usage(f"{path}: `{key}` must be true or false")
        out[key] = value
    return out


def uses_tls_scheme(address: str) -> bool:
    """Whether a console address asks for TLS by its scheme (grpcs://, https://)."""
    return address.strip().startswith(TLS_SCHEMES)


def load(env: Mapping[str, str], console_flag: str | None = None) -> ClientConfig:
    """Merge file, environment and flag into the effective config."""
    path = config_path(env)
    file = read_file(path)
    console, source = file.get("console"), "file"
    if env.get("STARFORGE_CONSOLE"):
        console, source = env["STARFORGE_CONSOLE"], "env"
    if console_flag:
        console, source = console_flag, "flag"
    if not console:
        console, source = DEFAULT_CONSOLE, "default"
    token = env.get("STARFORGE_TOKEN") or file.get("token")
    ca_file = env.get("STARFORGE_CA_FILE") or file.get("ca_file")
    return ClientConfig(
        console=normalize_address(console),
        token=token or None,
        path=path,
        console_from=source,
        file_console=file.get("console"),
        file_token=file.get("token"),
        tls=bool(file.get("tls") or ca_file or uses_tls_scheme(console)),
        ca_file=ca_file or None,
        insecure=bool(file.get("insecure")),
    )


def normalize_address(address: str) -> str:
    """Accept "host:port", "grpc://host:port", "grpcs://host:port" or a bare "host" (port 7070)."""
    value = address.strip()
    for scheme in ("grpc://", "http://", *TLS_SCHEMES):
        if value.startswith(scheme):
            value = value[len(scheme) :]
    value = value.rstrip("/")
    if not value:
        raise usage("the console address is empty; use HOST:PORT, e.g. 127.0.0.1:7070")
    if value.startswith("["):  # [::1]:7070
        return value if "]:" in value else f"{value}:7070"
    if ":" not in value:
        return f"{value}:7070"
    return value


def save(path: pathlib.Path, *, console: str | None, token: str | None, tls: bool | None = None) -> None:
    """Write the file with mode 0600, replacing it atomically; None values are left out.

    The TLS keys already in the file stay; `tls=True` (a grpcs:// console given to `sf login`)
    sets `tls: true`.
    """
    kept = {k: v for k, v in read_file(path).items() if k in TLS_KEYS}
    data: dict[str, Any] = {k: v for k, v in (("console", console), ("token", token)) if v}
    data.update(kept)
    if tls:
        data["tls"] = True
    import yaml

    text = "# StarForge client config (written by sf); holds a personal access token.\n"
    _write_atomically(path, text + (yaml.safe_dump(data, sort_keys=False) if data else ""))


CONSOLES_FILE = "consoles.yaml"


def consoles_path(env: Mapping[str, str]) -> pathlib.Path:
    """Where `sf up` records the state directory of each console it started."""
    return config_path(env).parent / CONSOLES_FILE


def _read_consoles(path: pathlib.Path) -> dict[str, str]:
    """address -> state directory; an unreadable or malformed file counts as empty (it is only
    a record of what `sf up` started, never the user's settings)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def _write_consoles(path: pathlib.Path, consoles: Mapping[str, str]) -> None:
    import yaml

    text = "# Consoles `sf up --detach` started: address -> state directory (read by `sf down`).\n"
    _write_atomically(path, text + (yaml.safe_dump(dict(consoles), sort_keys=True) if consoles else ""))


def remember_console(env: Mapping[str, str], address: str, state_dir: pathlib.Path) -> None:
    """Record that the console at `address` keeps its state in `state_dir`."""
    path = consoles_path(env)
    consoles = _read_consoles(path)
    consoles[normalize_address(address)] = str(state_dir)
    _write_consoles(path, consoles)


def console_state_dir(env: Mapping[str, str], address: str) -> pathlib.Path | None:
    """The state directory of the console at `address`, if `sf up` started it."""
    value = _read_consoles(consoles_path(env)).get(normalize_address(address))
    return pathlib.Path(value) if value else None


def forget_console(env: Mapping[str, str], address: str) -> None:
    path = consoles_path(env)
    consoles = _read_consoles(path)
    if consoles.pop(normalize_address(address), None) is not None:
        _write_consoles(path, consoles)


def _write_atomically(path: pathlib.Path, text: str) -> None:
    """Replace `path` with `text` (mode 0600) so that a crash never leaves half a file."""
    import tempfile  # here: it imports shutil and with it bz2 and lzma, which `sf job ls` never needs

    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(prefix=".config-", dir=path.parent)  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
