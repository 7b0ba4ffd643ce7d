"""Every admission and local-validation refusal through the real `sf`: the exact message a user sees, the exit
code (2: found by sf before anything was uploaded, 3: refused by the console), and nothing queued."""

from __future__ import annotations

import json
import pathlib

import grpc
import pytest
import yaml
from starforge_api.control.v1 import control_service_pb2 as ctl

from common.rpc_status import from_rpc_error
from control.config import InventoryConfig
from recipes.catalog import load_catalog
from tests.integration.console import Console, console, git

SFT = ["--model", "models/tiny", "--train-data", "data/train.jsonl"]


async def _refused(c: Console, lab: pathlib.Path, args: list[str], code: int, message: str) -> None:
    r = await c.sf_async(*args, cwd=lab, check=False)
    assert r.returncode == code, (args, r.returncode, r.stderr)
    assert f"error: {message}" in r.stderr, (args, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout


async def _nothing_queued(c: Console) -> None:
    jobs = await c.jobs.ListJobs(ctl.ListJobsRequest(owner="*"), metadata=c.md)
    assert list(jobs.jobs) == []


@pytest.fixture
async def cpu_console(tmp_path: pathlib.Path):  # type: ignore[no-untyped-def]
    async with console(tmp_path, image_allowlist=["registry.starforge.dev/"], hf_precheck=False) as c:
        yield c


async def test_method_refusals(cpu_console: Console) -> None:
    c = cpu_console
    lab = await c.lab(
        "sft",
        method="trl/sft",
        config={"image": "host"},
        files={"data/train.jsonl": "{}\n", "models/tiny/config.json": "{}"},
    )
    digest = load_catalog().get("trl/sft").digest[:12]  # type: ignore[union-attr]
    cases = [
        (
            ["submit", "sft", *SFT, "-s", "learning_rat=1e-4"],
            2,
            "-s learning_rat: trl/sft has no parameter 'learning_rat'; did you mean learning_rate?",
        ),
        (
            ["submit", "sft", *SFT, "-s", "learning_rate=5"],
            2,
            "-s learning_rate=5: 5.0 is above the maximum 1 for learning_rate",
        ),
        (["submit", "sft", *SFT, "-s", "max_steps=ten"], 2, "-s max_steps=ten: expected an int"),
        (
            ["submit", "sft", *SFT, "--profile", "h200:12"],
            2,
            "profile 'h200:12': 12 GPUs do not fill whole h200 nodes (8 per node); valid: h200:{1,2,4,8,16,32} (up to 8 per node, multiples of 8 beyond)",
        ),
        (
            ["submit", "sft", *SFT, "--profile", "b300:8"],
            2,
            "unknown GPU series 'b300' in profile 'b300:8'; known series: a100, cpu, h100, h200, l40s",
        ),
        (
            ["submit", "sft", "--train-data", "data/train.jsonl"],
            3,
            "trl/sft needs a model: pass --model <hf-id-or-path>",
        ),
        (
            ["submit", "sft", "--model", "models/tiny"],
            3,
            "trl/sft needs training data: pass --train-data <path> (or --train-dataset owner/name@v)",
        ),
        (
            ["submit", "sft", *SFT, "--image", "evil.io/x:1"],
            3,
            "image evil.io/x:1 is not from an allowed registry (allowed: registry.starforge.dev/); push it to one of them or ask an admin to allow its registry",
        ),
        (
            ["submit", "sft", *SFT, "--profile", "h100:1"],
            3,
            "no fleet can run this job: fleet local has no h100 machines",
        ),
    ]
    for args, code, message in cases:
        await _refused(c, lab, args, code, message)
    # a lock the console no longer publishes
    lock_path = lab / "experiments" / "sft" / "recipe.lock.json"
    lock = json.loads(lock_path.read_text())
    lock_path.write_text(json.dumps({**lock, "version": "0.9.0", "digest": "0" * 64}))
    git(lab, "commit", "-qam", "an old lock")
    await _refused(
        c,
        lab,
        ["submit", "sft", *SFT],
        3,
        f"experiments/sft/recipe.lock.json is stale: it pins trl/sft 0.9.0 (000000000000), the console publishes "
        f"trl/sft {load_catalog().get('trl/sft').version} ({digest}); run `sf recipe upgrade sft` or submit with --upgrade-recipe",  # type: ignore[union-attr]
    )
    lock_path.write_text(json.dumps({**lock, "method": "trl/sftx"}))
    git(lab, "commit", "-qam", "an unknown method")
    names = ", ".join(load_catalog().names())
    await _refused(c, lab, ["submit", "sft", *SFT], 3, f"method 'trl/sftx' is not in the catalog; published: {names}")
    await _nothing_queued(c)


async def test_batch_and_shape_refusals(cpu_console: Console) -> None:
    c = cpu_console
    lab = await c.lab(
        "grpo",
        method="verl/grpo",
        config={"image": "host", "model": "m/m", "data": {"train": "t.parquet", "validation": "v.parquet"}},
        files={"t.parquet": "x", "v.parquet": "y"},
    )
    await _refused(
        c,
        lab,
        ["submit", "grpo", "--profile", "h200:8", "-s", "data.train_batch_size=1020"],
        3,
        "data.train_batch_size=1020 does not divide over 8 data-parallel GPUs; use a multiple of 8 (e.g. 1016 or 1024)",
    )
    await _refused(
        c,
        lab,
        ["submit", "grpo", "--profile", "cpu"],
        3,
        "verl/grpo needs GPUs; ask for a GPU profile (e.g. --profile h100:8)",
    )
    await _nothing_queued(c)


async def test_lab_refusals(cpu_console: Console) -> None:
    c = cpu_console
    lab = await c.lab("exp")
    cfg_path = lab / "experiments" / "exp" / "config.yaml"
    # custom/custom reports externally unless config.yaml says platform
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg.pop("observability")
    cfg_path.write_text(yaml.safe_dump(cfg))
    git(lab, "commit", "-qam", "no observability")
    await _refused(
        c,
        lab,
        ["submit", "exp"],
        3,
        "custom/custom reports to an external tracker by default: pass --observability-url <url>, or set "
        "`observability: platform` in config.yaml to use StarForge's metrics",
    )
    cfg_path.write_text(yaml.safe_dump({**cfg, "observability": "external"}))
    git(lab, "commit", "-qam", "external")
    await _refused(
        c,
        lab,
        ["submit", "exp"],
        2,
        "config.yaml says `observability: external`: pass the tracker with --observability-url URL",
    )
    # a sensitive file is never packed
    (lab / ".env").write_text("HF_TOKEN=hf_secret\n")
    git(lab, "add", "-f", ".env")
    git(lab, "commit", "-qm", "oops")
    await _refused(
        c,
        lab,
        ["submit", "exp", "--observability-url", "http://wandb.local"],
        2,
        "refusing to pack 1 sensitive file(s) from the lab: .env",
    )
    git(lab, "rm", "-q", "--cached", ".env")
    git(lab, "commit", "-qm", "untrack")
    (lab / ".env").unlink()
    # a dirty tree is refused unless --allow-dirty
    (lab / "experiments" / "exp" / "train.sh").write_text("#!/usr/bin/env bash\necho edited\n")
    await _refused(
        c,
        lab,
        ["submit", "exp", "--observability-url", "http://wandb.local"],
        2,
        "the lab has 1 uncommitted change(s); a run must be traceable to a commit",
    )
    await _nothing_queued(c)
    r = await c.sf_async(
        "-o", "json", "submit", "exp", "--observability-url", "http://wandb.local", "--allow-dirty", cwd=lab
    )
    assert json.loads(r.stdout)["job"]["provenance"]["git_dirty"] is True


async def test_the_server_refuses_a_sensitive_file_sf_did_not_catch(cpu_console: Console) -> None:
    """The server never trusts the client: a JobSpec built by hand with a .env is refused too."""
    c = cpu_console
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await c.submit_custom("#!/usr/bin/env bash\necho hi\n", extra_files={"conf/.env": b"TOKEN=x\n"})
    err = from_rpc_error(e.value)
    assert err.reason_name == "SENSITIVE_FILE"
    assert err.message == (
        "the package contains conf/.env (environment file, usually holds secrets); remove it from git or add it "
        "to package.exclude in starforge.yaml"
    )
    await _nothing_queued(c)


async def test_misconfigured_fleets_are_never_used(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path / "kind", fleet_kind="slurm", inventory=[InventoryConfig("cpu", 1, 0, slots=4)]) as c:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await c.submit_custom("#!/usr/bin/env bash\necho hi\n")
        assert from_rpc_error(e.value).message == (
            f"no fleet can run this job: fleet local is configured as kind 'slurm' but the executor at "
            f"{c.executor_address} is 'local'; fix the fleet's kind or address"
        )
        await _nothing_queued(c)
    async with console(tmp_path / "addr", fleet_address="127.0.0.1:1") as c:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await c.submit_custom("#!/usr/bin/env bash\necho hi\n")
        message = from_rpc_error(e.value).message
        assert message.startswith("no fleet can run this job: fleet local: executor at 127.0.0.1:1 is unreachable")
        await _nothing_queued(c)
