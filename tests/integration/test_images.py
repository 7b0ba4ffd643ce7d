"""Images and framework versions through the real `sf` against a real console: where the image
came from (dry run, `sf job status`), the host runtime a fleet declares, the refusals (no image,
a look-alike registry, an unknown framework version) and the production tag warning.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml
from starforge_api.control.v1 import control_service_pb2 as ctl
from starforge_api.job.v1 import job_pb2

from control import embedded, images
from control.config import InventoryConfig
from tests.integration.backends.docker import DockerEngine
from tests.integration.console import Console, console, git

SFT = ["--model", "models/tiny", "--train-data", "data/train.jsonl", "--profile", "cpu"]


async def _refused(c: Console, lab: pathlib.Path, args: list[str], code: int, message: str) -> None:
    r = await c.sf_async(*args, cwd=lab, check=False)
    assert r.returncode == code, (args, r.returncode, r.stdout, r.stderr)
    assert f"error: {message}" in r.stderr, (args, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout


async def _nothing_queued(c: Console) -> None:
    jobs = await c.jobs.ListJobs(ctl.ListJobsRequest(owner="*"), metadata=c.md)
    assert list(jobs.jobs) == []


async def _custom_lab_without_image(c: Console, name: str = "exp") -> pathlib.Path:
    lab = await c.lab(name)
    cfg_path = lab / "experiments" / name / "config.yaml"
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg.pop("image")
    cfg_path.write_text(yaml.safe_dump(cfg))
    git(lab, "commit", "-qam", "no image")
    return lab


async def _status(c: Console, lab: pathlib.Path, job_id: str) -> dict[str, object]:
    r = await c.sf_async("-o", "json", "job", "status", job_id, cwd=lab)
    job: dict[str, object] = json.loads(r.stdout)["job"]
    return job


async def test_no_image_is_refused_where_no_fleet_declares_the_host_runtime(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FORGE_IMAGE_CUSTOM", raising=False)
    async with console(tmp_path, default_images={}, hf_precheck=False) as c:
        lab = await _custom_lab_without_image(c)
        await _refused(c, lab, ["submit", "exp"], 3, images.missing_message("custom/custom", "custom"))
        await _nothing_queued(c)
        # explicitly asked for, the host environment is there (a process-runtime fleet)
        r = await c.sf_async("submit", "exp", "--image", "host", "--dry-run", cwd=lab)
        assert "image: host (no container: the fleet's own environment) (from submission: --image)" in r.stdout


async def test_a_declared_host_runtime_is_used_and_shown(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FORGE_IMAGE_CUSTOM", raising=False)
    async with console(tmp_path, default_images={}, hf_precheck=False, fleet_options={"host_runtime": True}) as c:
        lab = await _custom_lab_without_image(c)
        r = await c.sf_async("submit", "exp", "--dry-run", cwd=lab)
        detail = "fleet local declares the host runtime (host_runtime: true): no container"
        assert f"image: host (no container: the fleet's own environment) (from host runtime: {detail})" in r.stdout
        r = await c.sf_async("-o", "json", "submit", "exp", cwd=lab)
        job_id = json.loads(r.stdout)["job"]["job_id"]
        job = await _status(c, lab, job_id)
        assert (job["image"], job["image_source"], job["image_source_detail"]) == (
            "host",
            "IMAGE_SOURCE_HOST_RUNTIME",
            detail,
        )
        r = await c.sf_async("job", "status", job_id, cwd=lab)
        assert "host runtime: fleet local declares the host runtime" in " ".join(r.stdout.split())
        # FORGE_IMAGE_CUSTOM (the console's framework default) wins over the host runtime
        monkeypatch.setenv("FORGE_IMAGE_CUSTOM", "host")
        r = await c.sf_async("submit", "exp", "--dry-run", cwd=lab)
        assert "(from console default: FORGE_IMAGE_CUSTOM in the console's environment)" in r.stdout
        # Clean up: the job may have ended on its own meanwhile (a quick train.sh on a fast machine).
        r = await c.sf_async("job", "stop", job_id, cwd=lab, check=False)
        assert r.returncode == 0 or "already ended" in r.stderr, r.stderr


async def test_look_alike_registries_are_refused_through_sf(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, image_allowlist=["registry.local", "corp.io/team"], hf_precheck=False) as c:
        lab = await c.lab("exp")
        for image in ("registry.local.evil.io/x:1", "registry.localhost/x:1", "corp.io/team-evil/x:1"):
            await _refused(
                c,
                lab,
                ["submit", "exp", "--image", image],
                3,
                f"image {image} is not from an allowed registry (allowed: registry.local, corp.io/team); "
                "push it to one of them or ask an admin to allow its registry",
            )
        await _refused(
            c,
            lab,
            ["submit", "exp", "--image", "registry.local/../x:1"],
            3,
            "image 'registry.local/../x:1' (--image) is not a valid image reference",
        )
        await _nothing_queued(c)


async def test_framework_version_end_to_end(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, hf_precheck=False) as c:
        lab = await c.lab(
            "sft",
            method="trl/sft",
            config={"image": "host"},
            files={"data/train.jsonl": "{}\n", "models/tiny/config.json": "{}"},
        )
        lock_path = lab / "experiments" / "sft" / "recipe.lock.json"
        assert json.loads(lock_path.read_text())["framework_version"] == "1.16.0"
        before = lock_path.read_text()
        known = "known versions: 1.16.0, 1.15.0"
        # an unknown version: refused by sf, by the console's lock resolution, and by admission
        await _refused(
            c,
            lab,
            ["submit", "sft", *SFT, "--framework-version", "9.9"],
            2,
            f"--framework-version 9.9: trl/sft has no framework version '9.9'; {known}",
        )
        await _refused(
            c,
            lab,
            ["submit", "sft", *SFT, "--upgrade-recipe", "--framework-version", "9.9"],
            3,
            f"trl/sft has no framework version '9.9'; {known}",
        )
        await _refused(
            c,
            lab,
            ["submit", "sft", *SFT, "--no-validate", "--framework-version", "9.9"],
            3,
            f"trl/sft has no framework version '9.9'; {known}",
        )
        assert lock_path.read_text() == before  # nothing lost, nothing rewritten
        await _nothing_queued(c)

        r = await c.sf_async(
            "-o", "json", "submit", "sft", *SFT, "--upgrade-recipe", "--framework-version", "1.15.0", cwd=lab
        )
        lock = json.loads(lock_path.read_text())
        assert (lock["framework_version"], lock["runtime_id"]) == ("1.15.0", "trl-1.15.0")
        submitted = json.loads(r.stdout)["job"]
        assert submitted["spec"]["recipe_lock"]["framework_version"] == "1.15.0"
        job = await _status(c, lab, submitted["job_id"])
        assert (job["framework_version"], job["runtime_id"]) == ("1.15.0", "trl-1.15.0")
        r = await c.sf_async("job", "status", submitted["job_id"], cwd=lab)
        assert "1.15.0 (runtime trl-1.15.0)" in r.stdout
        await c.sf_async("job", "stop", submitted["job_id"], cwd=lab)


async def test_each_verl_version_is_checked_against_its_own_keys(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path, hf_precheck=False, inventory=[InventoryConfig("h100", 1, 8)]) as c:
        lab = await c.lab(
            "grpo",
            method="verl/grpo",
            config={"image": "host", "model": "m/m", "data": {"train": "t.parquet", "validation": "v.parquet"}},
            files={"t.parquet": "x", "v.parquet": "y"},
        )
        only_090 = "data.continuous_token.enable=true"
        args = ["submit", "grpo", "--profile", "h100:8", "--dry-run", "-s", only_090]
        r = await c.sf_async(*args, "--framework-version", "0.9.0", cwd=lab)
        assert "framework: 0.9.0 (runtime verl-0.9.0-vllm)" in r.stdout
        r = await c.sf_async(*args, "--framework-version", "0.9.1", cwd=lab, check=False)
        assert r.returncode == 2, r.stderr
        assert "-s data.continuous_token.enable: neither a parameter of verl/grpo nor a key of verl 0.9.1" in r.stderr
        r = await c.sf_async(*args, "--framework-version", "0.9.1", "--no-validate", cwd=lab, check=False)
        assert r.returncode == 3, r.stderr
        assert "nor a key of verl 0.9.1" in r.stderr


@pytest.mark.docker
async def test_docker_fleet_image_sources_and_the_production_tag_warning(
    tmp_path: pathlib.Path, dockerd: DockerEngine, python_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FORGE_IMAGE_CUSTOM", raising=False)
    repo = python_image.split(":", maxsplit=1)[0]
    registry = tmp_path / "runtimes.yaml"
    registry.write_text("runtimes: {}\n")
    async with console(
        tmp_path / "c",
        runtime="docker",
        local={"docker": {"base_url": dockerd.base_url}},
        image_allowlist=[repo],
        default_images={},
        runtime_registry_file=registry,
        fleet_options={"production": True},
    ) as c:
        lab = await _custom_lab_without_image(c)
        # a container fleet: no host runtime to fall back on, and `host` is refused
        await _refused(c, lab, ["submit", "exp"], 3, images.missing_message("custom/custom", "custom"))
        await _refused(
            c,
            lab,
            ["submit", "exp", "--image", "host"],
            3,
            "no fleet can run this job: fleet local runs images (docker); image 'host' needs a process-runtime fleet",
        )
        await _nothing_queued(c)
        # a tag on a production fleet: admitted with a warning, printed and recorded
        warning = (
            f"image {python_image} is pinned by tag, not by digest, and the job may run on production fleet(s) "
            f"local: a tag can be moved; pin it as {repo}@sha256:<digest>"
        )
        r = await c.sf_async("submit", "exp", "--image", python_image, "--dry-run", cwd=lab)
        assert f"warning: {warning}" in " ".join(r.stderr.split()), r.stderr
        assert f"image: {python_image} (from submission: --image)" in r.stdout
        r = await c.sf_async("-o", "json", "submit", "exp", "--image", python_image, cwd=lab)
        out = json.loads(r.stdout)
        assert out["warnings"] == [warning]
        job = await _status(c, lab, out["job"]["job_id"])
        assert job["warnings"] == [warning]
        await c.sf_async("job", "stop", out["job"]["job_id"], cwd=lab)
        # a digest: no warning
        pinned = f"{repo}@sha256:{'c' * 64}"
        r = await c.sf_async("-o", "json", "submit", "exp", "--image", pinned, "--dry-run", cwd=lab)
        assert json.loads(r.stdout)["warnings"] == []
        # the runtime registry file names custom's image: read as it is now, its source shown
        registry.write_text(f"runtimes: {{custom: {{'1': '{pinned}'}}}}\n")
        r = await c.sf_async("-o", "json", "submit", "exp", "--dry-run", cwd=lab)
        job_pb = json.loads(r.stdout)["job"]
        assert (job_pb["image"], job_pb["image_source"]) == (pinned, job_pb2.ImageSource.Name(3))
        assert job_pb["image_source_detail"] == f"{registry}: runtimes.custom.1"


@pytest.mark.docker
async def test_a_host_runtime_declared_on_a_container_fleet_is_a_misconfiguration(
    tmp_path: pathlib.Path, dockerd: DockerEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FORGE_IMAGE_CUSTOM", raising=False)
    async with console(
        tmp_path,
        runtime="docker",
        local={"docker": {"base_url": dockerd.base_url}},
        default_images={},
        fleet_options={"host_runtime": True},
    ) as c:
        lab = await _custom_lab_without_image(c)
        await _refused(
            c,
            lab,
            ["submit", "exp", "--dry-run"],
            3,
            f"no fleet can run this job: fleet local declares host_runtime but its executor at {c.executor_address} "
            "runs images (docker); remove host_runtime or use a process-runtime executor",
        )


def test_the_embedded_console_declares_the_host_runtime_of_its_process_fleet(tmp_path: pathlib.Path) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "d").mkdir()
    process = embedded.console_config(tmp_path / "p", "127.0.0.1:0", "127.0.0.1:1", runtime="process")
    docker = embedded.console_config(tmp_path / "d", "127.0.0.1:0", "127.0.0.1:1", runtime="docker")
    assert [f.host_runtime for f in process.fleets] == [True]
    assert [f.host_runtime for f in docker.fleets] == [False]
    # nothing maps a method to host behind the user's back
    assert process.default_images == {} and docker.default_images == {}
