"""starforge: what training code uses to talk to the StarForge platform.

    import starforge

    for step, batch in enumerate(loader):
        loss = train_step(batch)
        starforge.report(step=step, loss=loss, lr=scheduler.get_last_lr()[0])
    starforge.sample("2+2=", "4", reward=1.0)
    torch.save(state, starforge.checkpoint_dir() / "last.pt")

The runner puts this package on PYTHONPATH and listens on FORGE_REPORT_SOCKET, an AF_UNIX datagram
socket ("@name" is a Linux abstract-namespace name, anything else a filesystem path). Each call
sends one JSON datagram. Sends block rather than drop when the runner falls behind, so nothing
reported is lost. Outside StarForge (no FORGE_REPORT_SOCKET), report() and sample() warn once on
stderr and do nothing else, so the same script runs on a laptop.

In external observability mode the runner does not put this package on PYTHONPATH: an image that
wants it installs the wheel (`make sdk-wheel`: build/sdk/starforge_sdk-*.whl), and
observability_url() / observability_tool() say where the job's tracker is.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pathlib
import socket
import sys
import threading
import time
from typing import Any

__all__ = [
    "attempt",
    "attempt_id",
    "checkpoint_dir",
    "config",
    "job_id",
    "observability_tool",
    "observability_url",
    "out_dir",
    "report",
    "resumed",
    "sample",
]

__version__ = "1.1.0"
FORMAT_VERSION = 1
# Linux caps one AF_UNIX datagram at about the socket send buffer (~208 KiB by default).
MAX_DATAGRAM = 192 * 1024
# Texts of a sample that does not fit are cut to this many characters each.
TRUNCATED_TEXT = 32 * 1024
_RETRY_ERRNOS = (errno.EAGAIN, errno.ENOBUFS, errno.EINTR)
_GONE_ERRNOS = (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTCONN, errno.EPIPE)


def _address(name: str) -> str:
    return "\0" + name[1:] if name.startswith("@") else name


class _Reporter:
    """One per process: the socket, the step counter and the warn-once state."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._disabled = False
        self._warned = False
        self.next_step = 0
        self.last_step: int | None = None

    def reset_after_fork(self) -> None:
        # A lock held by another thread at fork time would never be released in the child.
        self._lock = threading.Lock()
        self._sock = None

    def step_for(self, step: int | None, *, advance: bool) -> int:
        with self._lock:
            if step is None:
                if not advance:
                    return self.last_step if self.last_step is not None else self.next_step
                step = self.next_step
            step = int(step)
            if step < 0:
                raise ValueError(f"starforge: step must be >= 0, got {step}")
            if advance:
                self.next_step = step + 1
                self.last_step = step
            return step

    def socket_name(self) -> str | None:
        """FORGE_REPORT_SOCKET, or None (after one warning) when reports go nowhere."""
        if self._disabled:
            return None
        name = os.environ.get("FORGE_REPORT_SOCKET", "")
        if not name:
            self._warn(
                "FORGE_REPORT_SOCKET is not set (not running under StarForge); "
                "starforge.report() and sample() do nothing"
            )
            self._disabled = True
            return None
        return name

    def send(self, name: str, data: bytes) -> None:
        with self._lock:
            self._send_locked(name, data)

    def _send_locked(self, name: str, data: bytes) -> None:
        while True:
            try:
                if self._sock is None:
                    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    with contextlib.suppress(OSError):  # best effort: capped by wmem_max
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MAX_DATAGRAM * 2)
                    sock.connect(_address(name))
                    self._sock = sock
                self._sock.send(data)  # blocks while the runner's queue is full
                return
            except OSError as exc:
                if exc.errno in _RETRY_ERRNOS:
                    time.sleep(0.001)
                    continue
                if exc.errno == errno.EMSGSIZE:
                    print(
                        f"starforge: a report of {len(data)} bytes is too large for {name}; dropped it",
                        file=sys.stderr,
                        flush=True,
                    )
                    return
                if exc.errno in _GONE_ERRNOS:
                    self._warn(f"the StarForge runner is not listening on {name} ({exc}); reports are dropped")
                    self._disabled = True
                    self._close()
                    return
                raise

    def _close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _warn(self, text: str) -> None:
        if not self._warned:
            self._warned = True
            print(f"starforge: {text}", file=sys.stderr, flush=True)


_reporter = _Reporter()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reporter.reset_after_fork)


def _number(value: Any) -> Any:
    """Plain floats for numpy/torch scalars; anything else goes as is (the runner warns)."""
    if isinstance(value, (bool, int, float)):
        return value
    item = getattr(value, "item", None)
    if callable(item):
        try:
            value = item()
        except (TypeError, ValueError, RuntimeError):
            return str(value)
        if isinstance(value, (bool, int, float)):
            return value
    if hasattr(value, "__float__") and not isinstance(value, (str, bytes)):
        try:
            return float(value)
        except (TypeError, ValueError):
            pass
    return value if isinstance(value, str) else str(value)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _dumps(doc: dict[str, Any]) -> bytes:
    # ASCII-only JSON: its length in characters is its size in bytes.
    return json.dumps(doc, separators=(",", ":"), allow_nan=True, default=str).encode("ascii")


def _encode_metrics(step: int, now: float, scalars: dict[str, Any]) -> list[bytes]:
    """The datagram(s) of one report(): one, or several when a huge dict would not fit in one."""
    values = {str(name): _number(value) for name, value in scalars.items()}
    data = _dumps({"v": FORMAT_VERSION, "kind": "metrics", "step": step, "time": now, "scalars": values})
    if len(data) <= MAX_DATAGRAM or len(values) <= 1:
        return [data]
    items = list(values.items())
    half = len(items) // 2
    return _encode_metrics(step, now, dict(items[:half])) + _encode_metrics(step, now, dict(items[half:]))


def _encode_sample(step: int, now: float, prompt: Any, completion: Any, reward: Any, extra: dict[str, Any]) -> bytes:
    """The datagram of one sample(); texts too long for one datagram are cut (and marked)."""
    doc: dict[str, Any] = {
        "v": FORMAT_VERSION,
        "kind": "sample",
        "step": step,
        "time": now,
        "prompt": _text(prompt),
        "completion": _text(completion),
        "extra": {
            str(k): v if isinstance(v, str) else json.dumps(v, default=str, allow_nan=True) for k, v in extra.items()
        },
    }
    if reward is not None:
        doc["reward"] = _number(reward)
    data = _dumps(doc)
    if len(data) > MAX_DATAGRAM:
        doc["prompt"] = doc["prompt"][:TRUNCATED_TEXT]
        doc["completion"] = doc["completion"][:TRUNCATED_TEXT]
        doc["extra"] = {k: v[:1024] for k, v in list(doc["extra"].items())[:32]}
        doc["extra"]["starforge_truncated"] = "true"
        data = _dumps(doc)
    return data


def report(step: int | None = None, **scalars: Any) -> int:
    """Report scalar metrics at ``step``; returns the step used.

    Without ``step`` the step is the previous one plus 1 (0 at first). Values must be numbers
    (numpy and torch scalars are converted); a value that is not shows up as a warning in the
    job's log and is dropped. NaN and infinity are reported as they are.
    """
    used = _reporter.step_for(step, advance=True)
    name = _reporter.socket_name()
    if not scalars or name is None:
        return used
    for data in _encode_metrics(used, time.time(), scalars):
        _reporter.send(name, data)
    return used


def sample(
    prompt: Any,
    completion: Any,
    reward: float | None = None,
    step: int | None = None,
    **extra: Any,
) -> None:
    """Report one generated example (e.g. an RL rollout) with its optional reward.

    ``step`` defaults to the step of the last report(). Extra keyword arguments are kept as
    strings (non-strings are JSON-encoded). Very long texts are cut to fit one datagram.
    """
    used = _reporter.step_for(step, advance=False)
    name = _reporter.socket_name()
    if name is not None:
        _reporter.send(name, _encode_sample(used, time.time(), prompt, completion, reward, extra))


def _env_path(name: str, default: str) -> pathlib.Path:
    return pathlib.Path(os.environ.get(name) or default)


def out_dir() -> pathlib.Path:
    """The job's persistent output directory (FORGE_OUT_DIR; ./out outside StarForge).

    It survives attempts: a resumed or retried attempt finds the previous one's files here.
    """
    path = _env_path("FORGE_OUT_DIR", "out")
    path.mkdir(parents=True, exist_ok=True)
    return path


def checkpoint_dir() -> pathlib.Path:
    """``out_dir()/checkpoints``, created; save checkpoints here so that resume finds them."""
    path = out_dir() / "checkpoints"
    path.mkdir(parents=True, exist_ok=True)
    return path


def attempt() -> int:
    """This attempt's number, 1-based (1 outside StarForge)."""
    try:
        return int(os.environ.get("FORGE_ATTEMPT_NUMBER", "1"))
    except ValueError:
        return 1


def resumed() -> bool:
    """True when FORGE_OUT_DIR holds an earlier attempt's checkpoints (FORGE_RESUME=1)."""
    return os.environ.get("FORGE_RESUME") == "1"


def job_id() -> str:
    """The job (run) id, "" outside StarForge."""
    return os.environ.get("FORGE_JOB_ID", "")


def attempt_id() -> str:
    """The attempt id "<job_id>.<n>", "" outside StarForge."""
    return os.environ.get("FORGE_ATTEMPT_ID", "")


def config() -> dict[str, Any]:
    """The run's config (capsule.json run.config), from the JSON file FORGE_CONFIG names."""
    path = os.environ.get("FORGE_CONFIG")
    if not path:
        return {}
    with open(path, encoding="utf-8") as f:
        loaded = json.load(f)
    return loaded if isinstance(loaded, dict) else {}


def observability_url() -> str:
    """The external tracker's URL (STARFORGE_OBSERVABILITY_URL, from `sf submit --observability-url`),
    "" in platform mode or outside StarForge. The tool's own variable (WANDB_BASE_URL,
    MLFLOW_TRACKING_URI) is set to the same URL, so the tracker's client finds it by itself."""
    return os.environ.get("STARFORGE_OBSERVABILITY_URL", "")


def observability_tool() -> str:
    """The external tracker: "wandb", "mlflow", or "" (platform mode, or a tracker StarForge does
    not know by name)."""
    return os.environ.get("STARFORGE_OBSERVABILITY_TOOL", "")
