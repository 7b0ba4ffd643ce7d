"""Where `sf` writes: data on stdout, chatter and errors on stderr, text or JSON.

Data (tables, job ids, JSON documents, log lines) goes to stdout so it can be piped; progress,
status lines, warnings and errors go to stderr. In JSON mode stdout carries exactly one JSON
document (or JSON Lines for streams), status chatter is dropped, warnings become
`{"warning": ...}` lines and errors `{"error": {...}}` on stderr.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import math
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from cli.errors import CliError

if TYPE_CHECKING:
    from google.protobuf import message
    from google.protobuf.timestamp_pb2 import Timestamp
    from rich.console import Console, RenderableType
    from rich.text import Text

# rich is imported where text is printed: JSON output, and commands that print nothing, never load it;
# protobuf where a message is converted (`sf --version` loads neither).


class Format(enum.StrEnum):
    """Value of `--output`."""

    text = "text"
    json = "json"


def message_to_dict(msg: message.Message) -> dict[str, Any]:
    """A proto message as JSON-ready dict (proto field names, enum names, int64 as strings)."""
    from google.protobuf import json_format

    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


_WORKSPACE_FILE_FIELDS = ("path", "sha256", "size", "executable")


def job_to_dict(job: Any) -> dict[str, Any]:
    """`message_to_dict(job)` for a Job (or any message with `spec.workspace.files`): the same
    dict, with the workspace's files (10,000 in a large lab) converted here rather than by
    json_format's field-by-field walk of every WorkspaceFile."""
    files = job.spec.workspace.files
    if not files or tuple(f.name for f in files[0].DESCRIPTOR.fields) != _WORKSPACE_FILE_FIELDS:
        return message_to_dict(job)
    rest = type(job)()
    rest.CopyFrom(job)
    rest.spec.workspace.ClearField("files")  # the workspace stays present, as in `job`
    out = message_to_dict(rest)
    workspace = out["spec"]["workspace"]
    # WorkspaceFile as MessageToDict writes it: fields in number order, defaults left out, int64 as a string
    listed = []
    for f in files:
        d: dict[str, Any] = {}
        if f.path:
            d["path"] = f.path
        if f.sha256:
            d["sha256"] = f.sha256
        if f.size:
            d["size"] = str(f.size)
        if f.executable:
            d["executable"] = True
        listed.append(d)
    out["spec"]["workspace"] = {"files": listed, **workspace}
    return out


class Output:
    """The two streams of one command invocation, in text or JSON mode."""

    def __init__(self, fmt: Format = Format.text) -> None:
        self.json = fmt == Format.json

    # Consoles look up sys.stdout/sys.stderr when they write, so CliRunner's capture works.
    @functools.cached_property
    def out(self) -> Console:
        from rich.console import Console

        return Console(highlight=False, soft_wrap=False)

    @functools.cached_property
    def err(self) -> Console:
        from rich.console import Console

        return Console(stderr=True, highlight=False, soft_wrap=True)

    @property
    def interactive(self) -> bool:
        """True when a person watches stderr: progress bars and spinners only then."""
        return not self.json and self.err.is_terminal

    @property
    def stdout_tty(self) -> bool:
        return sys.stdout.isatty()

    def data(self, obj: Any) -> None:
        """Print one JSON document on stdout (JSON mode)."""
        sys.stdout.write(dumps_indented(obj, _json_default) + "\n")
        sys.stdout.flush()

    def json_line(self, obj: Any) -> None:
        """Print one compact JSON object per line (streams in JSON mode)."""
        import json

        sys.stdout.write(json.dumps(obj, separators=(",", ":"), default=_json_default) + "\n")
        sys.stdout.flush()

    def write(self, text: str) -> None:
        """Print text that is already laid out on stdout (text mode), as it is."""
        sys.stdout.write(text)
        sys.stdout.flush()

    def show(self, renderable: RenderableType) -> None:
        """Print a table, panel or line on stdout (text mode)."""
        self.out.print(renderable)

    def line(self, text: str, style: str = "") -> None:
        """Print plain text on stdout, never interpreted as rich markup."""
        from rich.text import Text

        self.out.print(Text(text, style=style), soft_wrap=True)

    def info(self, text: str | Text) -> None:
        """A status line on stderr; dropped in JSON mode."""
        if self.json:
            return
        from rich.text import Text

        self.err.print(text if isinstance(text, Text) else Text(text))

    def success(self, text: str) -> None:
        """A status line with a green check on stderr; dropped in JSON mode."""
        if self.json:
            return
        from rich.text import Text

        self.err.print(Text.assemble(("✓ ", "green"), text))

    def warn(self, text: str) -> None:
        """A warning on stderr, in both modes."""
        if self.json:
            import json

            sys.stderr.write(json.dumps({"warning": text}) + "\n")
            return
        from rich.text import Text

        self.err.print(Text.assemble(("warning: ", "yellow bold"), text))


def print_error(err: CliError, *, as_json: bool) -> None:
    """The one place an error is printed: `error: <message>` plus bullets, or JSON."""
    if as_json:
        import json

        sys.stderr.write(json.dumps(err.to_json(), default=_json_default) + "\n")
        sys.stderr.flush()
        return
    from rich.console import Console
    from rich.text import Text

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    console.print(Text.assemble(("error: ", "bold red"), err.message))
    for line in err.details:
        console.print(Text.assemble("  • ", line))
    if err.hint:
        console.print(Text.assemble(("  hint: ", "dim"), err.hint))


def dumps_indented(obj: Any, default: Callable[[Any], Any]) -> str:
    """`json.dumps(obj, indent=2, default=default)`, the same text, without the standard library's
    pure-Python encoder (any `indent` selects it): a `sf submit -o json` document lists every file
    of the workspace, and for 10,000 files that encoder was most of the time spent printing it.
    Strings go through the C string encoder; containers are joined here."""
    import json.encoder

    enc = json.encoder.encode_basestring_ascii  # the C function where _json is built, as json.dumps uses
    on_path: set[int] = set()

    def key(k: Any) -> str:
        if isinstance(k, str):
            return enc(k)
        if isinstance(k, float):
            return enc(floatstr(k))
        if k is True:
            return '"true"'
        if k is False:
            return '"false"'
        if k is None:
            return '"null"'
        if isinstance(k, int):
            return enc(int.__repr__(k))
        raise TypeError(f"keys must be str, int, float, bool or None, not {k.__class__.__name__}")

    def floatstr(o: float) -> str:
        if math.isnan(o):
            return "NaN"
        if o == math.inf:
            return "Infinity"
        if o == -math.inf:
            return "-Infinity"
        return float.__repr__(o)

    def value(o: Any, pad: str) -> str:
        if isinstance(o, str):
            return enc(o)
        if o is None:
            return "null"
        if o is True:
            return "true"
        if o is False:
            return "false"
        if isinstance(o, int):
            return int.__repr__(o)
        if isinstance(o, float):
            return floatstr(o)
        is_container = isinstance(o, list | tuple | dict)
        if is_container and not o:
            return "[]" if not isinstance(o, dict) else "{}"
        if id(o) in on_path:
            raise ValueError("Circular reference detected")
        on_path.add(id(o))
        text = container(o, pad) if is_container else value(default(o), pad)
        on_path.discard(id(o))
        return text

    def container(o: list[Any] | tuple[Any, ...] | dict[Any, Any], pad: str) -> str:
        inner = pad + "  "
        sep = ",\n" + inner
        if isinstance(o, dict):
            return "{\n" + inner + sep.join([key(k) + ": " + value(v, inner) for k, v in o.items()]) + "\n" + pad + "}"
        if _flat_records(o):
            return _records_indented(o, pad)
        return "[\n" + inner + sep.join([value(v, inner) for v in o]) + "\n" + pad + "]"

    return value(obj, "")


_SCALARS = frozenset((str, int, bool, type(None)))


def _flat_records(items: list[Any] | tuple[Any, ...]) -> bool:
    """Whether `items` are all non-empty dicts of str keys and str/int/bool/None values (a
    manifest's files): those `_records_indented` encodes with the C encoder."""
    return all(
        type(d) is dict and d and all(type(k) is str and type(v) in _SCALARS for k, v in d.items()) for d in items
    )


def _records_indented(items: list[Any] | tuple[Any, ...], pad: str) -> str:
    """A non-empty list of `_flat_records`, as `json.dumps(indent=2)` writes it at indentation `pad`.

    One call of the C encoder with a NUL in the item separator: an encoded string never holds a raw
    control character (ensure_ascii escapes them), so every NUL is a separator, and one between two
    records is the only one preceded by `}`. Replacing them and the records' braces gives the
    indented text."""
    import json

    compact = json.JSONEncoder(separators=(",\0", ": ")).encode(items)
    outer, inner = pad + "  ", pad + "    "
    text = compact[2:-2].replace("},\0{", "\1").replace("\0", "\n" + inner)
    text = text.replace("\1", "\n" + outer + "},\n" + outer + "{\n" + inner)
    return "[\n" + outer + "{\n" + inner + text + "\n" + outer + "}\n" + pad + "]"


def _json_default(obj: Any) -> Any:
    from google.protobuf import message

    if isinstance(obj, message.Message):
        return message_to_dict(obj)
    if isinstance(obj, dt.datetime | dt.date):
        return obj.isoformat()
    if isinstance(obj, enum.Enum):
        return obj.value
    raise TypeError(f"cannot encode {type(obj).__name__} as JSON")


# ---------------------------------------------------------------- formatting helpers for tables


def ts_to_datetime(ts: Timestamp) -> dt.datetime | None:
    """A proto Timestamp as aware datetime; None when unset (seconds and nanos both 0)."""
    if ts.seconds == 0 and ts.nanos == 0:
        return None
    return ts.ToDatetime(tzinfo=dt.UTC)


def age(ts: Timestamp, now: dt.datetime | None = None) -> str:
    """How long ago, compact ("12s", "5m", "3h", "2d"); "-" when unset."""
    when = ts_to_datetime(ts)
    if when is None:
        return "-"
    seconds = int(((now or dt.datetime.now(dt.UTC)) - when).total_seconds())
    return duration(max(seconds, 0))


def duration(seconds: float) -> str:
    """A duration, compact ("45s", "3m", "1h20m", "2d")."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h}h{m:02d}m" if m else f"{h}h"
    return f"{s // 86400}d"


def timestamp_text(ts: Timestamp) -> str:
    """Local wall-clock time with its age ("2026-05-01 12:00:03 (5m ago)"), "-" when unset."""
    when = ts_to_datetime(ts)
    if when is None:
        return "-"
    local = when.astimezone()
    return f"{local:%Y-%m-%d %H:%M:%S} ({age(ts)} ago)"


def human_bytes(n: float) -> str:
    """Bytes in decimal units, as `sf` prints them ("1.2 MB")."""
    units = ["B", "kB", "MB", "GB", "TB"]
    value = float(n)
    for unit in units:
        if abs(value) < 1000 or unit == units[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"  # pragma: no cover - loop always returns


_SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = 30) -> str:
    """A unicode sparkline of `values`, bucket-averaged down to `width` characters."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return ""
    if len(finite) > width:
        buckets: list[float] = []
        for i in range(width):
            lo = i * len(finite) // width
            hi = max((i + 1) * len(finite) // width, lo + 1)
            chunk = finite[lo:hi]
            buckets.append(sum(chunk) / len(chunk))
        finite = buckets
    low, high = min(finite), max(finite)
    if high == low:
        return _SPARKS[len(_SPARKS) // 2] * len(finite)
    scale = (len(_SPARKS) - 1) / (high - low)
    return "".join(_SPARKS[round((v - low) * scale)] for v in finite)
