"""Authorization matrix: every way in without the right token is refused, with the message a user sees."""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import grpc
import pytest
from starforge_api.control.v1 import account_service_pb2 as acc
from starforge_api.control.v1 import account_service_pb2_grpc as acc_grpc
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.control.v1 import fleet_service_pb2 as fleet_pb
from starforge_api.control.v1 import fleet_service_pb2_grpc as fleet_grpc
from starforge_api.forgelet.v1 import node_pb2
from starforge_api.forgelet.v1 import node_registry_service_pb2 as reg_pb
from starforge_api.forgelet.v1 import node_registry_service_pb2_grpc as reg_grpc
from starforge_api.ingest.v1 import ingest_service_pb2 as ing
from starforge_api.ingest.v1 import ingest_service_pb2_grpc as ing_grpc

from common.channel import bearer
from common.rpc_status import from_rpc_error
from control import auth
from control.db import models as m
from tests.integration.console import console

# Console-level: each test runs with its ledger on SQLite and on PostgreSQL.
pytestmark = pytest.mark.usefixtures("ledger")

SLEEP = "#!/usr/bin/env bash\nsleep 30\n"


async def _refused(call: Awaitable[object], code: grpc.StatusCode, text: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await call
    assert e.value.code() == code, e.value
    assert text in (e.value.details() or ""), e.value.details()
    assert "Traceback" not in (e.value.details() or "")


async def test_authorization_matrix(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        accounts = acc_grpc.AccountServiceStub(c.channel)
        bob = (await accounts.CreateUser(acc.CreateUserRequest(name="bob"), metadata=c.md)).token
        job = await c.submit_custom(SLEEP)
        other = await c.submit_custom(SLEEP, experiment="other")

        def get(md: Any) -> Any:
            return c.jobs.GetJob(ctl.GetJobRequest(job_id=job.job_id), metadata=md)

        # no token, garbage, a well-formed unknown token
        await _refused(get(()), grpc.StatusCode.UNAUTHENTICATED, "no token: run `sf login`")
        await _refused(get(bearer("garbage")), grpc.StatusCode.UNAUTHENTICATED, "the token is malformed")
        await _refused(
            get(bearer("sfp_aaaaaaaaaa_" + "b" * 43)), grpc.StatusCode.UNAUTHENTICATED, "the token is not valid"
        )

        # expired and revoked tokens
        short = await accounts.CreateToken(acc.CreateTokenRequest(name="short", ttl_seconds=1), metadata=c.md)
        await asyncio.sleep(1.2)
        await _refused(
            get(bearer(short.token)), grpc.StatusCode.UNAUTHENTICATED, f"the token {short.info.token_id} has expired"
        )
        revoked = await accounts.CreateToken(acc.CreateTokenRequest(name="gone"), metadata=c.md)
        await c.jobs.GetJob(ctl.GetJobRequest(job_id=job.job_id), metadata=bearer(revoked.token))  # valid first
        await accounts.RevokeToken(acc.RevokeTokenRequest(token_id=revoked.info.token_id), metadata=c.md)
        await _refused(get(bearer(revoked.token)), grpc.StatusCode.UNAUTHENTICATED, "was revoked")

        # another user's job: invisible, and cannot be stopped
        await _refused(get(bearer(bob)), grpc.StatusCode.NOT_FOUND, f"job {job.job_id} not found")
        await _refused(
            c.jobs.StopJob(ctl.StopJobRequest(job_id=job.job_id), metadata=bearer(bob)),
            grpc.StatusCode.NOT_FOUND,
            "not found",
        )
        await _refused(
            c.jobs.ListJobs(ctl.ListJobsRequest(owner="admin"), metadata=bearer(bob)),
            grpc.StatusCode.PERMISSION_DENIED,
            "you cannot list @admin's jobs",
        )
        mine = await c.jobs.ListJobs(ctl.ListJobsRequest(), metadata=bearer(bob))
        assert list(mine.jobs) == []
        # an admin sees everyone's
        everyone = await c.jobs.ListJobs(ctl.ListJobsRequest(owner="*"), metadata=c.md)
        assert {j.job_id for j in everyone.jobs} >= {job.job_id, other.job_id}
        # a non-admin cannot create users
        await _refused(
            accounts.CreateUser(acc.CreateUserRequest(name="eve"), metadata=bearer(bob)),
            grpc.StatusCode.PERMISSION_DENIED,
            "only admins can create users",
        )

        # run tokens: scoped to one attempt, and only for ingest
        await c.wait(job.job_id, 4, timeout=30)  # RUNNING: its attempt exists
        await c.wait(other.job_id, 4, timeout=30)

        # nor can its log be followed, with a cursor as a running job's followers send
        async def follow_as_bob() -> None:
            request = ctl.StreamJobLogsRequest(job_id=job.job_id, follow=True, after_attempt_number=1, after_offset=0)
            async for _ in c.jobs.StreamJobLogs(request, metadata=bearer(bob), timeout=5):
                pass

        await _refused(follow_as_bob(), grpc.StatusCode.NOT_FOUND, f"job {job.job_id} not found")
        run_token = await c.app.ctx.db.run(lambda s: auth.issue_run_token(s, "admin", job.job_id, f"{job.job_id}.1"))
        ingest = ing_grpc.IngestServiceStub(c.channel)
        other_attempt = f"{other.job_id}.1"
        await _refused(
            ingest.GetCursor(ing.GetCursorRequest(attempt_id=other_attempt), metadata=bearer(run_token)),
            grpc.StatusCode.PERMISSION_DENIED,
            "this run token belongs to another attempt",
        )

        async def one_batch() -> AsyncIterator[ing.ReportRequest]:
            yield ing.ReportRequest(attempt_id=other_attempt, records=[])

        with pytest.raises(grpc.aio.AioRpcError) as e:
            async for _ in ingest.Report(one_batch(), metadata=bearer(run_token)):
                pass
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert from_rpc_error(e.value).reason_name == "TOKEN_SCOPE"
        own = await ingest.GetCursor(ing.GetCursorRequest(attempt_id=f"{job.job_id}.1"), metadata=bearer(run_token))
        assert own.acked_seq >= 0
        await _refused(
            get(bearer(run_token)),
            grpc.StatusCode.PERMISSION_DENIED,
            "a run token cannot call GetJob (it needs a personal access token)",
        )
        await _refused(
            ingest.GetCursor(ing.GetCursorRequest(attempt_id=f"{job.job_id}.1"), metadata=c.md),
            grpc.StatusCode.PERMISSION_DENIED,
            "a personal access token cannot call GetCursor (it needs a run token)",
        )

        # the run token expires with its run: ours, one a previous release issued (scoped by its
        # name alone), not one that already expires sooner, and not another attempt's
        def more_tokens(s: Any) -> tuple[str, str, str]:
            legacy = auth.issue_token(s, "admin", "run", name=f"run {job.job_id}.1", job_id=job.job_id)[1]
            sooner = auth.issue_token(
                s, "admin", "run", ttl_seconds=5, job_id=job.job_id, attempt_id=f"{job.job_id}.1"
            )[1]
            theirs = auth.issue_token(s, "admin", "run", job_id=other.job_id, attempt_id=other_attempt)[1]
            return legacy.id, sooner.id, theirs.id

        def expires(s: Any, token_id: str) -> float | None:
            row = s.get(m.Token, token_id)
            assert row is not None
            return row.expires_at  # type: ignore[no-any-return]

        legacy, sooner, theirs = await c.app.ctx.db.run(more_tokens)
        soon = await c.app.ctx.db.run(lambda s: expires(s, sooner))
        assert soon is not None
        await c.jobs.StopJob(ctl.StopJobRequest(job_id=job.job_id), metadata=c.md)
        await c.wait(job.job_id, 7, timeout=30)
        rows = await c.app.ctx.db.run(
            lambda s: {t.id: t.expires_at for t in s.query(m.Token).filter(m.Token.job_id == job.job_id)}
        )
        assert len(rows) >= 3 and all(x is not None for x in rows.values())
        assert (rows[legacy] or 0) > soon
        assert rows[sooner] == soon
        assert await c.app.ctx.db.run(lambda s: expires(s, theirs)) is None

        # a run token made in the very transaction that ends its attempt expires with it too
        def made_and_expired(s: Any) -> str:
            row = auth.issue_token(s, "admin", "run", job_id=other.job_id, attempt_id=f"{other.job_id}.9")[1]
            auth.expire_run_tokens(s, f"{other.job_id}.9")
            return str(row.id)

        made = await c.app.ctx.db.run(made_and_expired)
        assert await c.app.ctx.db.run(lambda s: expires(s, made)) is not None
        await c.jobs.StopJob(ctl.StopJobRequest(job_id=other.job_id), metadata=c.md)


async def test_node_registry_and_fleet_matrix(tmp_path: pathlib.Path) -> None:
    """Who may call NodeRegistryService, and who sees executor addresses."""
    async with console(tmp_path) as c:
        accounts = acc_grpc.AccountServiceStub(c.channel)
        bob = bearer((await accounts.CreateUser(acc.CreateUserRequest(name="bob"), metadata=c.md)).token)
        registry = reg_grpc.NodeRegistryServiceStub(c.channel)
        node = node_pb2.Node(name="n1", fleet="local", address="127.0.0.1:1")

        # a personal access token is no node identity
        for call in (
            registry.RegisterNode(reg_pb.RegisterNodeRequest(node=node), metadata=bob),
            registry.RegisterNode(reg_pb.RegisterNodeRequest(node=node), metadata=c.md),
        ):
            await _refused(call, grpc.StatusCode.PERMISSION_DENIED, "a personal access token cannot call RegisterNode")
        await _refused(
            registry.Heartbeat(reg_pb.HeartbeatRequest(name="n1"), metadata=bob),
            grpc.StatusCode.PERMISSION_DENIED,
            "it needs a node credential",
        )
        # admin-only calls
        for call, what in (
            (registry.ListNodes(reg_pb.ListNodesRequest(), metadata=bob), "only admins can list nodes"),
            (registry.DrainNode(reg_pb.DrainNodeRequest(name="n1"), metadata=bob), "only admins can drain"),
            (registry.UndrainNode(reg_pb.UndrainNodeRequest(name="n1"), metadata=bob), "only admins can drain"),
            (
                registry.CreateJoinToken(reg_pb.CreateJoinTokenRequest(node="n1", fleet="local"), metadata=bob),
                "only admins can mint node join tokens",
            ),
            (
                registry.CreateExecutorToken(reg_pb.CreateExecutorTokenRequest(fleet="local"), metadata=bob),
                "only admins can mint executor tokens",
            ),
        ):
            await _refused(call, grpc.StatusCode.PERMISSION_DENIED, what)

        # an executor token lists its own fleet only, and is nothing else
        executor = bearer(
            (await registry.CreateExecutorToken(reg_pb.CreateExecutorTokenRequest(fleet="local"), metadata=c.md)).token
        )
        assert list((await registry.ListNodes(reg_pb.ListNodesRequest(), metadata=executor)).nodes) == []
        await _refused(
            registry.ListNodes(reg_pb.ListNodesRequest(fleet="gpu"), metadata=executor),
            grpc.StatusCode.PERMISSION_DENIED,
            "this executor token lists fleet 'local' only",
        )
        await _refused(
            c.jobs.ListJobs(ctl.ListJobsRequest(), metadata=executor),
            grpc.StatusCode.PERMISSION_DENIED,
            "an executor token cannot call ListJobs",
        )
        # a join token registers its node, nothing else
        join = bearer(
            (
                await registry.CreateJoinToken(reg_pb.CreateJoinTokenRequest(node="n1", fleet="local"), metadata=c.md)
            ).token
        )
        await _refused(
            registry.ListNodes(reg_pb.ListNodesRequest(), metadata=join),
            grpc.StatusCode.PERMISSION_DENIED,
            "a node join token cannot call ListNodes",
        )

        # executor addresses: admins only
        fleets = fleet_grpc.FleetServiceStub(c.channel)
        seen_by_bob = await fleets.ListFleets(fleet_pb.ListFleetsRequest(), metadata=bob)
        seen_by_admin = await fleets.ListFleets(fleet_pb.ListFleetsRequest(), metadata=c.md)
        assert [f.executor_address for f in seen_by_bob.fleets] == [""]
        assert [f.executor_address for f in seen_by_admin.fleets] == [c.executor_address]
