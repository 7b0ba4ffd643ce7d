"""`cli.h2unary` / `cli.fastclient` against a real grpc.aio server: the same bytes reach the server as
from grpcio's client (`cli.client.Client`), and every answer becomes the same response or the same
`CliError`. The server plays the attacker too: a wrong certificate, plaintext where TLS was
configured, a message larger than the client accepts."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from starforge_api.catalog.v1 import catalog_service_pb2 as catalog_pb
from starforge_api.catalog.v1 import recipe_pb2
from starforge_api.control.v1 import account_service_pb2 as account_pb
from starforge_api.control.v1 import control_service_pb2 as pb
from starforge_api.control.v1 import error_reason_pb2
from starforge_api.control.v1 import fleet_service_pb2 as fleet_pb
from starforge_api.job.v1 import job_pb2, job_spec_pb2

from cli import client as grpc_client
from cli import fastclient, h2unary
from cli.errors import CliError
from common import errors
from common.rpc_status import to_grpc_status
from tests.security.tls_support import Pki, make_pki

SERVICE = "starforge.control.v1.ControlService"


@dataclass
class Server:
    """A ControlService with GetJob and ListJobs whose behaviour each test sets; records what it got."""

    address: str = ""
    seen: list[tuple[str, tuple[tuple[str, Any], ...], bytes]] = field(default_factory=list)
    behave: Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Any] | None = None


def _handler(server: Server, name: str) -> grpc.RpcMethodHandler[Any, Any]:
    async def handle(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        md = tuple((k, v) for k, v in context.invocation_metadata() or () if k in ("authorization",))
        server.seen.append((name, md, request.SerializeToString()))
        assert server.behave is not None
        return await server.behave(request, context)

    request_type = pb.GetJobRequest if name == "GetJob" else pb.ListJobsRequest
    response_type = pb.GetJobResponse if name == "GetJob" else pb.ListJobsResponse
    return grpc.unary_unary_rpc_method_handler(
        handle, request_deserializer=request_type.FromString, response_serializer=response_type.SerializeToString
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def _serve(creds: grpc.ServerCredentials | None, host: str = "127.0.0.1") -> tuple[grpc.aio.Server, Server]:
    state = Server()
    server = grpc.aio.server()
    handlers = {name: _handler(state, name) for name in ("GetJob", "ListJobs")}
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])
    port = server.add_secure_port(f"{host}:0", creds) if creds else server.add_insecure_port(f"{host}:0")
    await server.start()
    state.address = f"127.0.0.1:{port}"  # the certificate's name
    return server, state


@pytest.fixture
async def plain() -> AsyncIterator[Server]:
    server, state = await _serve(None)
    yield state
    await server.stop(0)


@pytest.fixture
async def tls(pki: Pki) -> AsyncIterator[Server]:
    """On every loopback address (127.0.0.0/8); its certificate names 127.0.0.1 and localhost only."""
    creds = grpc.ssl_server_credentials([(pki.leaf.key.read_bytes(), pki.leaf.cert.read_bytes())])
    server, state = await _serve(creds, "0.0.0.0")
    yield state
    await server.stop(0)


def _get(c: grpc_client.Client | fastclient.ReadClient, job_id: str) -> pb.GetJobResponse | CliError:
    try:
        response: pb.GetJobResponse = c.call(c.control.GetJob, pb.GetJobRequest(job_id=job_id), timeout=2.0)
        return response
    except CliError as err:
        return err
    finally:
        c.close()


async def _both(
    address: str, job_id: str = "j1", token: str = "sfp_tok", **kw: Any
) -> tuple[pb.GetJobResponse | CliError, pb.GetJobResponse | CliError]:
    """The grpcio client's answer and the fast client's, in that order."""
    ours = fastclient.ReadClient(address, token, tls=kw.get("tls", False), ca_file=kw.get("ca_file"), insecure=False)
    theirs = grpc_client.Client(address, token, tls=kw.get("tls", False), ca_file=kw.get("ca_file"))
    return await asyncio.to_thread(_get, theirs, job_id), await asyncio.to_thread(_get, ours, job_id)


async def test_a_call_sends_what_grpcio_sends_and_reads_the_same_answer(plain: Server) -> None:
    async def ok(request: pb.GetJobRequest, _: Any) -> pb.GetJobResponse:
        return pb.GetJobResponse(job=job_pb2.Job(job_id=request.job_id, owner="ünï" * 5000))  # > one frame

    plain.behave = ok
    theirs, ours = await _both(plain.address)
    assert isinstance(ours, pb.GetJobResponse) and ours == theirs
    assert plain.seen[0] == plain.seen[1]  # the token metadata and the request bytes
    assert plain.seen[1][1] == (("authorization", "Bearer sfp_tok"),)


@pytest.mark.parametrize(
    "error",
    [
        errors.NotFound("job j9 not found; müssen 100% %41 sein"),  # percent-encoded, non-ASCII
        errors.Unauthenticated("the token is malformed"),
        errors.PermissionDenied("not yours", metadata={"job": "j9"}),
        errors.InvalidArgument(
            "bad request",
            field_violations=(errors.FieldViolation("job_id", "too long"),),
            retry_after_seconds=1.5,
        ),
    ],
)
async def test_a_refusal_is_the_same_cli_error(plain: Server, error: errors.StarforgeError) -> None:
    async def refuse(_: Any, context: Any) -> None:
        await context.abort_with_status(to_grpc_status(error))

    plain.behave = refuse
    theirs, ours = await _both(plain.address)
    assert isinstance(ours, CliError) and ours.to_json() == theirs.to_json()  # type: ignore[union-attr]


async def test_an_abort_without_details_is_the_same_cli_error(plain: Server) -> None:
    async def refuse(_: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "plain abort, 50%")

    plain.behave = refuse
    theirs, ours = await _both(plain.address)
    assert isinstance(ours, CliError) and ours.to_json() == theirs.to_json()  # type: ignore[union-attr]


async def test_a_slow_server_is_the_same_deadline_error(plain: Server) -> None:
    async def slow(_: Any, __: Any) -> pb.GetJobResponse:
        await asyncio.sleep(4)
        return pb.GetJobResponse()

    plain.behave = slow
    theirs, ours = await _both(plain.address)
    # which side's deadline fires first (the server's from grpc-timeout, or the client's) is a race,
    # and grpcio words its details differently for each: the class of failure is the same
    assert isinstance(ours, CliError) and isinstance(theirs, CliError)
    assert (ours.code, ours.exit_code, ours.reason) == (theirs.code, theirs.exit_code, theirs.reason)
    assert ours.message.startswith(f"the console at {plain.address} did not answer in time (")


async def test_an_unreachable_console_is_the_same_error() -> None:
    theirs, ours = await _both("127.0.0.1:1")
    assert isinstance(ours, CliError) and ours.to_json() == theirs.to_json()  # type: ignore[union-attr]


async def test_a_message_larger_than_the_limit_is_not_read(plain: Server) -> None:
    """A hostile server cannot make the client hold more than max_receive bytes of message."""

    async def huge(_: Any, __: Any) -> pb.ListJobsResponse:
        return pb.ListJobsResponse(jobs=[job_pb2.Job(job_id="x" * 1000)] * 300)

    plain.behave = huge

    def call() -> bytes:
        channel = h2unary.Channel(plain.address, tls=None, timeout=5, max_receive=64 * 1024)
        try:
            return channel.unary(f"/{SERVICE}/ListJobs", b"", (), 5)
        finally:
            channel.close()

    with pytest.raises(h2unary.Status) as caught:
        await asyncio.to_thread(call)
    assert caught.value.code == h2unary.RESOURCE_EXHAUSTED
    assert caught.value.message.startswith("Received message larger than max (")


async def test_tls_with_the_right_ca_reads_over_h2(tls: Server, pki: Pki) -> None:
    async def ok(request: pb.GetJobRequest, _: Any) -> pb.GetJobResponse:
        return pb.GetJobResponse(job=job_pb2.Job(job_id=request.job_id))

    tls.behave = ok
    theirs, ours = await _both(tls.address, tls=True, ca_file=str(pki.ca))
    assert isinstance(ours, pb.GetJobResponse) and ours == theirs
    context = h2unary.tls_context(pki.ca.read_text())
    channel = await asyncio.to_thread(h2unary.Channel, tls.address, tls=context, timeout=5, max_receive=1 << 20)
    channel.close()  # h2 itself completed the verified handshake (no fallback to grpcio)


async def test_a_certificate_the_ca_does_not_sign_is_refused_before_sending(tls: Server, pki: Pki) -> None:
    tls.behave = None  # any call reaching the server fails the test
    context = h2unary.tls_context(pki.rogue_ca.read_text())
    with pytest.raises(h2unary.Fallback, match="CERTIFICATE_VERIFY_FAILED"):
        await asyncio.to_thread(h2unary.Channel, tls.address, tls=context, timeout=5, max_receive=1 << 20)
    theirs, ours = await _both(tls.address, tls=True, ca_file=str(pki.rogue_ca))
    assert isinstance(ours, CliError) and ours.to_json() == theirs.to_json()  # type: ignore[union-attr]
    assert "does not verify" in ours.message and not tls.seen


async def test_a_name_the_certificate_does_not_carry_is_refused(tls: Server, pki: Pki) -> None:
    """The leaf is for 127.0.0.1 and localhost: reached by another name, it does not verify."""
    context = h2unary.tls_context(pki.ca.read_text())
    port = tls.address.rsplit(":", 1)[1]
    with pytest.raises(h2unary.Fallback, match="CERTIFICATE_VERIFY_FAILED"):
        await asyncio.to_thread(h2unary.Channel, f"127.0.0.2:{port}", tls=context, timeout=5, max_receive=1 << 20)
    tls.behave = None
    theirs, ours = await _both(f"127.0.0.2:{port}", tls=True, ca_file=str(pki.ca))
    assert isinstance(ours, CliError) and ours.to_json() == theirs.to_json()  # type: ignore[union-attr]
    assert ours.exit_code == 5 and not tls.seen


async def test_tls_configured_against_a_plaintext_server_never_sends_in_plain_text(plain: Server, pki: Pki) -> None:
    plain.behave = None
    theirs, ours = await _both(plain.address, tls=True, ca_file=str(pki.ca))
    assert isinstance(ours, CliError) and ours.to_json() == theirs.to_json()  # type: ignore[union-attr]
    assert not plain.seen


def test_percent_decoding_keeps_malformed_escapes() -> None:
    assert h2unary.percent_decode(b"100%25 %zz %4") == "100% %zz %4"
    assert h2unary.percent_decode(b"%C3%BC") == "ü"


def test_the_deadline_matches_the_grpcio_client() -> None:
    assert fastclient.DEFAULT_TIMEOUT_S == grpc_client.DEFAULT_TIMEOUT_S


def test_settings_h2_does_not_apply_go_to_grpcio(tmp_path: pathlib.Path) -> None:
    """The system's CAs (grpcio has its own bundle) and a CA file that is not PEM: grpcio decides."""
    system = fastclient.ReadClient("127.0.0.1:1", "t", tls=True, ca_file=None, insecure=False)
    assert system._grpc is not None
    system.close()
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    with pytest.raises(CliError, match="is not a PEM certificate bundle"):
        fastclient.ReadClient("127.0.0.1:1", "t", tls=True, ca_file=str(bad), insecure=False)
    with pytest.raises(CliError, match="not on this machine and TLS is off"):
        fastclient.ReadClient("192.0.2.1:7070", "t", tls=False, ca_file=None, insecure=False)


# `sf submit`'s unary calls (an unchanged lab's re-submit makes them over h2): each method's path
# and response type, against a server that answers every one of them.
_SUBMIT_CALLS: dict[str, tuple[str, Any, Any, Any]] = {
    "SubmitJob": (
        SERVICE,
        pb.SubmitJobRequest(request_id="r1", workspace_digest="d" * 64),
        pb.SubmitJobRequest,
        pb.SubmitJobResponse(job=job_pb2.Job(job_id="j1", experiment="exp"), warnings=["w ü"]),
    ),
    "GetRecipe": (
        "starforge.catalog.v1.CatalogService",
        catalog_pb.GetRecipeRequest(name="custom/custom"),
        catalog_pb.GetRecipeRequest,
        catalog_pb.GetRecipeResponse(recipe=recipe_pb2.Recipe(name="custom/custom")),
    ),
    "ResolveLock": (
        "starforge.catalog.v1.CatalogService",
        catalog_pb.ResolveLockRequest(method="custom/custom"),
        catalog_pb.ResolveLockRequest,
        catalog_pb.ResolveLockResponse(lock=job_spec_pb2.RecipeLock(method="custom/custom", version="3")),
    ),
    "ListProfiles": (
        "starforge.control.v1.FleetService",
        fleet_pb.ListProfilesRequest(),
        fleet_pb.ListProfilesRequest,
        fleet_pb.ListProfilesResponse(profiles=[fleet_pb.HardwareProfile(series="h200")]),
    ),
    "WhoAmI": (
        "starforge.control.v1.AccountService",
        account_pb.WhoAmIRequest(),
        account_pb.WhoAmIRequest,
        account_pb.WhoAmIResponse(user=account_pb.User(name="alice")),
    ),
}


async def _serve_submit_calls(
    creds: grpc.ServerCredentials | None, refuse: errors.StarforgeError | None = None
) -> tuple[grpc.aio.Server, Server]:
    """A server of every `_SUBMIT_CALLS` method answering its canned response (or `refuse`)."""
    state = Server()
    server = grpc.aio.server()
    by_service: dict[str, dict[str, grpc.RpcMethodHandler[Any, Any]]] = {}
    for name, (service, _, request_type, response) in _SUBMIT_CALLS.items():

        async def handle(request: Any, context: Any, name: str = name, response: Any = response) -> Any:
            md = tuple((k, v) for k, v in context.invocation_metadata() or () if k in ("authorization",))
            state.seen.append((name, md, request.SerializeToString()))
            if refuse is not None:
                await context.abort_with_status(to_grpc_status(refuse))
            return response

        by_service.setdefault(service, {})[name] = grpc.unary_unary_rpc_method_handler(
            handle, request_deserializer=request_type.FromString, response_serializer=type(response).SerializeToString
        )
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(s, h) for s, h in by_service.items()])
    port = server.add_secure_port("127.0.0.1:0", creds) if creds else server.add_insecure_port("127.0.0.1:0")
    await server.start()
    state.address = f"127.0.0.1:{port}"
    return server, state


def _submit_calls(c: grpc_client.Client | fastclient.ReadClient) -> list[Any]:
    """Every `_SUBMIT_CALLS` call through `c`, as `sf submit` makes them: responses or CliErrors."""
    stubs: dict[str, Any] = {"SubmitJob": c.control, "GetRecipe": c.catalog, "ResolveLock": c.catalog}
    stubs |= {"ListProfiles": c.fleets, "WhoAmI": c.accounts}
    out: list[Any] = []
    try:
        for name, (_, request, _, _) in _SUBMIT_CALLS.items():
            try:
                out.append(c.call(getattr(stubs[name], name), request, timeout=5.0))
            except CliError as err:
                out.append(err.to_json())
    finally:
        c.close()
    return out


@pytest.mark.parametrize("secure", [False, True])
@pytest.mark.parametrize(
    "refuse", [None, errors.FailedPrecondition("gone", reason=error_reason_pb2.ERROR_REASON_MISSING_BLOB)]
)
async def test_submit_calls_send_and_read_what_grpcio_does(
    pki: Pki, secure: bool, refuse: errors.StarforgeError | None
) -> None:
    creds = grpc.ssl_server_credentials([(pki.leaf.key.read_bytes(), pki.leaf.cert.read_bytes())]) if secure else None
    server, state = await _serve_submit_calls(creds, refuse)
    ca_file = str(pki.ca) if secure else None
    try:
        ours = fastclient.ReadClient(state.address, "sfp_tok", tls=secure, ca_file=ca_file, insecure=False)
        assert ours._grpc is None  # h2 makes these calls
        theirs = grpc_client.Client(state.address, "sfp_tok", tls=secure, ca_file=ca_file)
        got_theirs = await asyncio.to_thread(_submit_calls, theirs)
        got_ours = await asyncio.to_thread(_submit_calls, ours)
        assert got_ours == got_theirs
        if refuse is None:
            assert got_ours == [response for *_, response in _SUBMIT_CALLS.values()]
        else:
            assert all(doc["error"]["reason"] == "MISSING_BLOB" for doc in got_ours), got_ours
        n = len(_SUBMIT_CALLS)
        assert state.seen[:n] == state.seen[n:]  # the same paths, token and request bytes
        assert [name for name, *_ in state.seen[n:]] == list(_SUBMIT_CALLS)
    finally:
        await server.stop(0)


async def test_streaming_hands_over_to_grpcio_for_good(plain: Server) -> None:
    """`streaming()` (an upload, a log stream): grpcio's client, which then makes every call."""

    async def ok(request: pb.GetJobRequest, _: Any) -> pb.GetJobResponse:
        return pb.GetJobResponse(job=job_pb2.Job(job_id=request.job_id))

    plain.behave = ok
    ours = fastclient.ReadClient(plain.address, "sfp_tok", tls=False, ca_file=None, insecure=False)
    try:
        first = await asyncio.to_thread(ours.call, ours.control.GetJob, pb.GetJobRequest(job_id="a"))
        assert ours._channel is not None and ours._grpc is None
        streaming = ours.streaming()
        assert isinstance(streaming, grpc_client.Client) and ours.streaming() is streaming
        assert ours._channel is None  # the HTTP/2 connection is closed
        second = await asyncio.to_thread(ours.call, ours.control.GetJob, pb.GetJobRequest(job_id="b"))
        assert (first.job.job_id, second.job.job_id) == ("a", "b")
        assert ours._channel is None and ours._grpc is streaming  # made through grpcio
    finally:
        ours.close()
    plain_client = grpc_client.Client(plain.address, "t")
    assert plain_client.streaming() is plain_client
    plain_client.close()
