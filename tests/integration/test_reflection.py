"""Server reflection v1 (and v1alpha) on every StarForge gRPC server, through a raw v1 client.

Real servers: the control plane of a live console, its `starforge-executor` process and a
`forgelet` process (process runtime). The client speaks `grpc.reflection.v1.ServerReflection`
over a bidirectional stream, as grpcurl and other languages' reflection clients do.
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2 as v1alpha

from common.channel import aio_channel
from common.reflection import V1_METHOD, v1_message_classes
from tests.integration.console import console
from tests.integration.forgelet.fleet import ForgeletProcess, join_token

V1Request, V1Response = v1_message_classes()


@pytest.fixture
async def servers(tmp_path: pathlib.Path) -> AsyncIterator[dict[str, str]]:
    """Addresses of the three kinds of server: control plane, executor service, forgelet."""
    async with console(tmp_path / "console") as c:
        f = ForgeletProcess("n1", tmp_path / "n1", c.address, await join_token(c, "n1"), runtime="process")
        f.start()
        try:
            yield {"control": c.address, "executor": c.executor_address, "forgelet": f.address}
        finally:
            f.stop()


async def reflect(address: str, requests: list[Any], method: str = V1_METHOD) -> list[Any]:
    """Send `requests` on one ServerReflectionInfo stream; the responses, in order."""
    request_type = type(requests[0])
    response_type = V1Response if request_type is V1Request else v1alpha.ServerReflectionResponse
    async with aio_channel(address) as channel:
        call = channel.stream_stream(
            method, request_serializer=request_type.SerializeToString, response_deserializer=response_type.FromString
        )(iter(requests), timeout=20)
        return [r async for r in call]


EXPECTED = {
    "control": "starforge.control.v1.ControlService",
    "executor": "starforge.executor.v1.ExecutorService",
    "forgelet": "starforge.forgelet.v1.ForgeletService",
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
async def test_v1_lists_services_and_serves_file_descriptors(servers: dict[str, str], kind: str) -> None:
    service = EXPECTED[kind]
    listed, by_symbol, missing = await reflect(
        servers[kind],
        [
            V1Request(list_services=""),
            V1Request(file_containing_symbol=service),
            V1Request(file_containing_symbol="starforge.nothing.v1.Nope"),
        ],
    )
    names = {s.name for s in listed.list_services_response.service}
    assert {service, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} <= names
    assert "grpc.reflection.v1alpha.ServerReflection" in names

    files = [
        descriptor_pb2.FileDescriptorProto.FromString(b)
        for b in by_symbol.file_descriptor_response.file_descriptor_proto
    ]
    package, _, name = service.rpartition(".")
    (own,) = [f for f in files if f.package == package and any(s.name == name for s in f.service)]
    # The response carries the file's dependencies too, so a client can build the types.
    assert set(own.dependency) <= {f.name for f in files}
    assert own.options.java_package == "dev." + package
    # The descriptor carries the proto comments: the service's and each RPC's documentation.
    comments = {tuple(loc.path): loc.leading_comments for loc in own.source_code_info.location}
    (index,) = [i for i, s in enumerate(own.service) if s.name == name]
    assert name in comments[(6, index)]
    for i, method in enumerate(own.service[index].method):
        assert comments[(6, index, 2, i)].strip().startswith(method.name), method.name

    assert missing.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]


async def test_v1_describes_itself_and_v1alpha_still_answers(servers: dict[str, str]) -> None:
    (itself,) = await reflect(
        servers["control"], [V1Request(file_containing_symbol="grpc.reflection.v1.ServerReflection")]
    )
    (f,) = [
        descriptor_pb2.FileDescriptorProto.FromString(b) for b in itself.file_descriptor_response.file_descriptor_proto
    ]
    assert (f.name, f.package, f.service[0].name) == (
        "grpc/reflection/v1/reflection.proto",
        "grpc.reflection.v1",
        "ServerReflection",
    )

    (old,) = await reflect(
        servers["control"],
        [v1alpha.ServerReflectionRequest(file_by_filename="starforge/control/v1/control_service.proto")],
        method="/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
    )
    assert old.file_descriptor_response.file_descriptor_proto
