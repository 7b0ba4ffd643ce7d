"""HuggingFace precheck at admission, against a local server speaking the Hub API (tests/hub_server.py)."""

from __future__ import annotations

import pathlib

import grpc
import pytest
from starforge_api.control.v1 import control_service_pb2 as ctl

from common.rpc_status import from_rpc_error
from tests.hub_server import HubRepos, hub_server
from tests.integration.console import console


async def test_missing_and_gated_models_are_refused_before_queueing(tmp_path: pathlib.Path) -> None:
    models = HubRepos(public={"acme/open-7b"}, gated={"acme/gated-9b": {"good-token"}, "acme/closed-9b": set()})
    with hub_server(models) as hub:
        async with console(tmp_path, hf_endpoint=hub, hf_token="good-token") as c:
            ok = await c.submit_custom("#!/usr/bin/env bash\necho ok\n", model="acme/open-7b")
            assert ok.job_id
            ok2 = await c.submit_custom("#!/usr/bin/env bash\necho ok\n", model="acme/gated-9b")
            assert ok2.job_id
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await c.submit_custom("#!/usr/bin/env bash\necho no\n", model="acme/missing-1b")
            err = from_rpc_error(e.value)
            assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert err.reason_name == "HF_PRECHECK"
            assert err.message == (
                f"model acme/missing-1b was not found on the Hub at {hub} (or it is private and the server's "
                "token cannot see it); check the id"
            )
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await c.submit_custom("#!/usr/bin/env bash\necho no\n", model="acme/closed-9b")
            assert from_rpc_error(e.value).message == (
                "model acme/closed-9b is gated and the server's HF token has no access: request access on its "
                "Hub page, then ask an admin to use a token that has it"
            )
            # a model directory in the workspace is not a Hub id: no request for it
            local = await c.submit_custom(
                "#!/usr/bin/env bash\necho ok\n", model="models/tiny", extra_files={"models/tiny/config.json": b"{}"}
            )
            assert local.job_id
            assert not any("models/tiny" in r for r in models.requests)
            jobs = await c.jobs.ListJobs(ctl.ListJobsRequest(), metadata=c.md)
            assert {j.job_id for j in jobs.jobs} == {ok.job_id, ok2.job_id, local.job_id}


async def test_unreachable_hub_is_a_clear_refusal(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, hf_endpoint="http://127.0.0.1:9", hf_token="") as c:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await c.submit_custom("#!/usr/bin/env bash\necho no\n", model="acme/open-7b")
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "the Hub at http://127.0.0.1:9 is unreachable" in (e.value.details() or "")
