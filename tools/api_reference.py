"""Render the API reference (docs/api-reference.md) from the comments in proto/.

    python -m tools.api_reference            # rewrite docs/api-reference.md
    python -m tools.api_reference --check    # exit 1 when the committed file is stale

The proto comments are the reference: `buf build` gives the descriptors with their source info,
and every service, RPC, message, field, enum and value is rendered with its leading comment.
`documented_errors()` reads the status codes each RPC's comment promises ("Errors: ..." of the
RPC, plus "Errors of every RPC: ..." of its service); the error-contract test checks them.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc
from google.protobuf import descriptor_pb2

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "api-reference.md"
STATUS_CODES = tuple(c.name for c in grpc.StatusCode if c is not grpc.StatusCode.OK)
# Descriptor paths (descriptor.proto field numbers): message_type=4, enum_type=5, service=6;
# inside a message field=2, nested_type=3, enum_type=4; inside an enum and a service value/method=2.
MESSAGE, ENUM, SERVICE, CHILD, NESTED_MESSAGE, NESTED_ENUM = 4, 5, 6, 2, 3, 4
SCALARS = {
    descriptor_pb2.FieldDescriptorProto.TYPE_DOUBLE: "double",
    descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT: "float",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT64: "int64",
    descriptor_pb2.FieldDescriptorProto.TYPE_UINT64: "uint64",
    descriptor_pb2.FieldDescriptorProto.TYPE_INT32: "int32",
    descriptor_pb2.FieldDescriptorProto.TYPE_UINT32: "uint32",
    descriptor_pb2.FieldDescriptorProto.TYPE_BOOL: "bool",
    descriptor_pb2.FieldDescriptorProto.TYPE_STRING: "string",
    descriptor_pb2.FieldDescriptorProto.TYPE_BYTES: "bytes",
    descriptor_pb2.FieldDescriptorProto.TYPE_SINT32: "sint32",
    descriptor_pb2.FieldDescriptorProto.TYPE_SINT64: "sint64",
    descriptor_pb2.FieldDescriptorProto.TYPE_FIXED32: "fixed32",
    descriptor_pb2.FieldDescriptorProto.TYPE_FIXED64: "fixed64",
}


@dataclass
class Rpc:
    name: str
    request: str
    response: str
    client_streaming: bool
    server_streaming: bool
    comment: str

    def codes(self, every: frozenset[str]) -> frozenset[str]:
        return frozenset(every | _codes_after(self.comment, "Errors:"))


@dataclass
class Service:
    full_name: str
    comment: str
    rpcs: list[Rpc] = field(default_factory=list)

    @property
    def every_rpc_codes(self) -> frozenset[str]:
        return _codes_after(self.comment, "Errors of every RPC:")


def _codes_after(comment: str, marker: str) -> frozenset[str]:
    text = " ".join(comment.split())
    at = text.find(marker)
    if at < 0:
        return frozenset()
    end = text.find(marker, at + len(marker))  # only up to the next marker, if any
    part = text[at + len(marker) : end if end > 0 else None]
    return frozenset(c for c in STATUS_CODES if re.search(rf"\b{c}\b", part))


def build_image() -> descriptor_pb2.FileDescriptorSet:
    """The StarForge files of proto/ with their comments (`buf build`)."""
    buf = shutil.which("buf") or str(pathlib.Path(sys.executable).parent / "buf")
    result = subprocess.run([buf, "build", "-o", "-#format=binpb"], cwd=ROOT, capture_output=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"buf build failed:\n{result.stderr.decode()}")
    return descriptor_pb2.FileDescriptorSet.FromString(result.stdout)


def _starforge_files(image: descriptor_pb2.FileDescriptorSet) -> list[descriptor_pb2.FileDescriptorProto]:
    return sorted((f for f in image.file if f.name.startswith("starforge/")), key=lambda f: f.name)


def _comments(f: descriptor_pb2.FileDescriptorProto) -> dict[tuple[int, ...], str]:
    return {
        tuple(loc.path): "\n".join(line.strip() for line in loc.leading_comments.strip().splitlines())
        for loc in f.source_code_info.location
    }


def services(image: descriptor_pb2.FileDescriptorSet | None = None) -> list[Service]:
    out = []
    for f in _starforge_files(image or build_image()):
        notes = _comments(f)
        for si, s in enumerate(f.service):
            svc = Service(f"{f.package}.{s.name}", notes.get((SERVICE, si), ""))
            for mi, m in enumerate(s.method):
                svc.rpcs.append(
                    Rpc(
                        m.name,
                        m.input_type.lstrip("."),
                        m.output_type.lstrip("."),
                        m.client_streaming,
                        m.server_streaming,
                        notes.get((SERVICE, si, CHILD, mi), ""),
                    )
                )
            out.append(svc)
    return out


def documented_errors(image: descriptor_pb2.FileDescriptorSet | None = None) -> dict[str, frozenset[str]]:
    """{"/package.Service/Rpc": status codes its comments document}."""
    return {f"/{s.full_name}/{r.name}": r.codes(s.every_rpc_codes) for s in services(image) for r in s.rpcs}


def _anchor(full_name: str) -> str:
    return full_name.replace(".", "").lower()


def _link(full_name: str) -> str:
    if full_name.startswith("starforge."):
        return f"[`{full_name.rsplit('.', 1)[-1]}`](#{_anchor(full_name)})"
    return f"`{full_name}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _field_type(fd: descriptor_pb2.FieldDescriptorProto, maps: dict[str, tuple[str, str]]) -> str:
    if fd.type_name:
        name = fd.type_name.lstrip(".")
        if name in maps:
            key, value = maps[name]
            return f"map<{key}, {value}>"
        kind = _link(name)
    else:
        kind = SCALARS.get(fd.type, str(fd.type))
    if fd.label == descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED:
        return f"repeated {kind}"
    if fd.proto3_optional:
        return f"optional {kind}"
    return kind


def _message(
    m: descriptor_pb2.DescriptorProto, prefix: str, path: tuple[int, ...], notes: dict[tuple[int, ...], str]
) -> Iterator[str]:
    full = f"{prefix}.{m.name}"
    maps = {
        f"{full}.{n.name}": (
            _field_type(n.field[0], {}).replace("`", ""),
            _field_type(n.field[1], {}),
        )
        for n in m.nested_type
        if n.options.map_entry
    }
    yield f'### <a id="{_anchor(full)}"></a>{m.name}'
    yield ""
    if prefix.count(".") > 2:
        yield f"Nested in `{prefix}`."
        yield ""
    yield notes.get(path, "")
    yield ""
    if m.field:
        yield "| Field | Number | Type | Description |"
        yield "|---|---|---|---|"
        for i, fd in enumerate(m.field):
            yield f"| `{fd.name}` | {fd.number} | {_field_type(fd, maps)} | {_cell(notes.get((*path, CHILD, i), ''))} |"
        yield ""
    for i, nested in enumerate(m.nested_type):
        if not nested.options.map_entry:
            yield from _message(nested, full, (*path, NESTED_MESSAGE, i), notes)
    for i, e in enumerate(m.enum_type):
        yield from _enum(e, full, (*path, NESTED_ENUM, i), notes)


def _enum(
    e: descriptor_pb2.EnumDescriptorProto, prefix: str, path: tuple[int, ...], notes: dict[tuple[int, ...], str]
) -> Iterator[str]:
    full = f"{prefix}.{e.name}"
    yield f'### <a id="{_anchor(full)}"></a>{e.name} (enum)'
    yield ""
    yield notes.get(path, "")
    yield ""
    yield "| Value | Number | Description |"
    yield "|---|---|---|"
    for i, v in enumerate(e.value):
        yield f"| `{v.name}` | {v.number} | {_cell(notes.get((*path, CHILD, i), ''))} |"
    yield ""


def _service(
    s: descriptor_pb2.ServiceDescriptorProto, package: str, si: int, notes: dict[tuple[int, ...], str]
) -> Iterator[str]:
    full = f"{package}.{s.name}"
    yield f'### <a id="{_anchor(full)}"></a>{s.name} (service)'
    yield ""
    yield notes.get((SERVICE, si), "")
    yield ""
    yield "| RPC | Request | Response | Description |"
    yield "|---|---|---|---|"
    for mi, m in enumerate(s.method):
        request = ("stream " if m.client_streaming else "") + _link(m.input_type.lstrip("."))
        response = ("stream " if m.server_streaming else "") + _link(m.output_type.lstrip("."))
        yield f"| `{m.name}` | {request} | {response} | {_cell(notes.get((SERVICE, si, CHILD, mi), ''))} |"
    yield ""


def render(image: descriptor_pb2.FileDescriptorSet | None = None) -> str:
    files = _starforge_files(image or build_image())
    lines = [
        "# StarForge API reference",
        "",
        "Generated by `python -m tools.api_reference` from the comments in `proto/`; do not edit by hand",
        "(a test fails when this file is stale). [api.md](api.md) explains how to call the API: the",
        "address, authorization, the error model, paging and streaming.",
        "",
    ]
    packages = sorted({f.package for f in files})
    lines += ["Packages: " + ", ".join(f"[`{p}`](#{_anchor(p)})" for p in packages), ""]
    for package in packages:
        lines += [f'## <a id="{_anchor(package)}"></a>{package}', ""]
        for f in (f for f in files if f.package == package):
            notes = _comments(f)
            lines += [f"File `proto/{f.name}`.", ""]
            for si, s in enumerate(f.service):
                lines += list(_service(s, f.package, si, notes))
            for mi, m in enumerate(f.message_type):
                lines += list(_message(m, f.package, (MESSAGE, mi), notes))
            for ei, e in enumerate(f.enum_type):
                lines += list(_enum(e, f.package, (ENUM, ei), notes))
    text = "\n".join(lines)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/api-reference.md is stale")
    parser.add_argument("--output", type=pathlib.Path, default=OUTPUT, help="where to write (default: %(default)s)")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is stale: run `python -m tools.api_reference`", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
