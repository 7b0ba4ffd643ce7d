"""gRPC server reflection, both the v1 protocol and the older v1alpha one.

grpcio-reflection ships only `grpc.reflection.v1alpha.ServerReflection`; current clients (grpcurl,
Postman, grpc-java/go's reflection clients) ask `grpc.reflection.v1.ServerReflection` first. The
two protocols have the same messages field for field and only the package differs, so v1 is served
by the same servicer through a generic handler, and its descriptor (the v1alpha file with the v1
package) is registered in the default pool so that a v1 client can reflect on reflection itself.

The StarForge files are served with their proto comments (source info), which the generated
Python modules leave out: `grpcurl describe` shows the documentation of every RPC and field.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_reflection.v1alpha import _async as reflection_aio
from grpc_reflection.v1alpha import reflection, reflection_pb2

V1_SERVICE_NAME = "grpc.reflection.v1.ServerReflection"
V1ALPHA_SERVICE_NAME: str = reflection.SERVICE_NAME
V1_FILE = "grpc/reflection/v1/reflection.proto"
V1_METHOD = f"/{V1_SERVICE_NAME}/ServerReflectionInfo"


def v1_file_descriptor() -> Any:
    """The v1 reflection file in the default pool (added on first use)."""
    pool = descriptor_pool.Default()
    try:
        return pool.FindFileByName(V1_FILE)
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = V1_FILE
    proto.package = "grpc.reflection.v1"
    for message in proto.message_type:
        for field in message.field:
            if field.type_name.startswith(".grpc.reflection.v1alpha."):
                field.type_name = ".grpc.reflection.v1." + field.type_name.rsplit(".", 1)[1]
    for method in proto.service[0].method:
        method.input_type = ".grpc.reflection.v1." + method.input_type.rsplit(".", 1)[1]
        method.output_type = ".grpc.reflection.v1." + method.output_type.rsplit(".", 1)[1]
    return pool.Add(proto)


def v1_message_classes() -> tuple[type[Any], type[Any]]:
    """(ServerReflectionRequest, ServerReflectionResponse) of the v1 protocol, for v1 clients."""
    file = v1_file_descriptor()
    return (
        message_factory.GetMessageClass(file.message_types_by_name["ServerReflectionRequest"]),
        message_factory.GetMessageClass(file.message_types_by_name["ServerReflectionResponse"]),
    )


@functools.cache
def commented_files() -> dict[str, bytes]:
    """The StarForge FileDescriptorProtos with their comments (gen: starforge_api/source_info.py), by
    file name, serialized; the generated Python modules embed them without comments."""
    try:
        from starforge_api import source_info
    except ImportError:  # a gen/ from before the plugin: descriptors without comments
        return {}
    files = descriptor_pb2.FileDescriptorSet.FromString(source_info.file_descriptor_set()).file
    return {f.name: f.SerializeToString() for f in files}


class CommentedReflectionServicer(reflection_aio.ReflectionServicer):  # type: ignore[misc]
    """grpcio-reflection's servicer, answering with the commented descriptor of a StarForge file."""

    def _file_by_filename(self, request: Any, filename: str) -> Any:
        return _with_comments(super()._file_by_filename(request, filename))

    def _file_containing_symbol(self, request: Any, fully_qualified_name: str) -> Any:
        return _with_comments(super()._file_containing_symbol(request, fully_qualified_name))

    def _file_containing_extension(self, request: Any, containing_type: str, extension_number: int) -> Any:
        return _with_comments(super()._file_containing_extension(request, containing_type, extension_number))


def _with_comments(response: Any) -> Any:
    if not response.HasField("file_descriptor_response"):
        return response
    commented = commented_files()
    files = response.file_descriptor_response.file_descriptor_proto
    for i, data in enumerate(files):
        name = descriptor_pb2.FileDescriptorProto.FromString(data).name
        if name in commented:
            files[i] = commented[name]
    return response


def enable_reflection(service_names: Sequence[str], server: grpc.aio.Server) -> None:
    """Serve reflection v1 and v1alpha on `server`, listing `service_names` and both protocols."""
    v1_file_descriptor()
    servicer = CommentedReflectionServicer([*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME])
    server.add_generic_rpc_handlers(
        (
            grpc.method_handlers_generic_handler(
                V1ALPHA_SERVICE_NAME, {"ServerReflectionInfo": _stream_handler(servicer)}
            ),
            grpc.method_handlers_generic_handler(V1_SERVICE_NAME, {"ServerReflectionInfo": _stream_handler(servicer)}),
        )
    )


def _stream_handler(servicer: Any) -> grpc.RpcMethodHandler[Any, Any]:
    # The v1 and v1alpha messages are identical on the wire: v1alpha's classes parse both.
    return grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
