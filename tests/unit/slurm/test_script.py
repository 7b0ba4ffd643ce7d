"""The batch script builder (pure): single node, multi-node Ray, heterogeneous, pyxis, apptainer."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from executor_svc.slurm.script import (
    RAY_FAILED_EXIT,
    Component,
    Container,
    RaySpec,
    ScriptSpec,
    build_script,
    wants_ray,
)

STAGE = "/shared/staging/jabc.1"
EXPORTS = {
    "FORGE_CAPSULE_DIR": f"{STAGE}/capsule",
    "FORGE_WORKSPACE_DIR": f"{STAGE}/workspace",
    "FORGE_ATTEMPT_ID": "jabc.1",
    "MY_SETTING": 'it\'s $HOME `and` "quotes"',
}


def spec(components: list[Component], **kwargs: object) -> ScriptSpec:
    return ScriptSpec(
        attempt_id="jabc.1",
        job_id="jabc",
        stage_dir=STAGE,
        exports=EXPORTS,
        components=components,
        secret_names=("FORGE_INGEST_TOKEN", "HF_TOKEN"),
        **kwargs,  # type: ignore[arg-type]
    )


def srun_lines(script: str) -> list[str]:
    return [line for line in script.splitlines() if line.startswith("srun ")]


def bash_syntax_ok(script: str) -> None:
    result = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True, check=False)
    assert result.returncode == 0, result.stderr


def test_single_node_runs_bootstrap_as_one_task() -> None:
    script = build_script(spec([Component("main", 1, 2)]))
    bash_syntax_ok(script)
    assert script.startswith("#!/bin/bash\n")
    assert srun_lines(script) == ['srun --nodes=1 --ntasks=1 sh "$FORGE_CAPSULE_DIR/bootstrap.sh" &']
    assert "ray" not in script.lower().replace("array", "")
    assert f"SF_STAGE={STAGE}" in script
    assert 'date +%s >"$SF_STAGE/started"' in script
    assert script.rstrip().endswith("sf_finish $? capsule")


def test_exports_are_quoted_so_the_shell_gives_back_the_exact_values() -> None:
    script = build_script(spec([Component("main", 1)]))
    exports = [line for line in script.splitlines() if line.startswith("export ")]
    assert len(exports) == len(EXPORTS)
    for line in exports:
        name, _, value = line.removeprefix("export ").partition("=")
        assert shlex.split(value) == [EXPORTS[name]]


def test_secrets_are_named_but_never_valued() -> None:
    script = build_script(spec([Component("main", 2, 1)], ray=RaySpec()))
    assert "(FORGE_INGEST_TOKEN, HF_TOKEN)" in script
    assert "FORGE_INGEST_TOKEN=" not in script
    assert "HF_TOKEN=" not in script
    # The Ray token is made when the job runs, never written into the script.
    assert "RAY_AUTH_TOKEN=$(od -An -N16 -tx1 /dev/urandom" in script


def test_names_that_cannot_be_exported_are_refused() -> None:
    bad = ScriptSpec("a.1", "a", STAGE, {"NOT-A-NAME": "x"}, [Component("main", 1)])
    with pytest.raises(ValueError, match="job's environment"):
        build_script(bad)


def test_multi_node_starts_ray_head_workers_and_waits_before_the_capsule() -> None:
    ray = RaySpec(node_ip="auto", port=0, start_timeout_seconds=120, object_store_memory_bytes=100_000_000)
    script = build_script(spec([Component("main", 3, 4, 16)], ray=ray))
    bash_syntax_ok(script)
    head, workers, wait, capsule = srun_lines(script)
    assert head.startswith('srun --nodes=1 --ntasks=1 --overlap -w "$sf_head" --cpus-per-task=16 ray start --head ')
    assert '--node-ip-address="$sf_head_ip"' in head
    assert "--num-gpus=4" in head and "--object-store-memory=100000000" in head
    assert "--include-dashboard=false" in head and "--disable-usage-stats" in head
    assert workers.startswith('srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --overlap -x "$sf_head"')
    assert 'ray start --address="$RAY_ADDRESS"' in workers
    assert "127.0.0" not in workers  # auto: workers find their address from the route to the head
    assert wait.endswith('python3 -c "$sf_ray_wait_py" 3 120 &')
    assert capsule == (
        'srun --nodes=1 --ntasks=1 --overlap -w "$sf_head" --cpus-per-task=16 sh "$FORGE_CAPSULE_DIR/bootstrap.sh" &'
    )
    assert "scontrol show node" in script and "getent ahostsv4" in script  # head address from Slurm
    assert "sf_ray_port=$((20000 + SLURM_JOB_ID % 20000))" in script
    assert f"sf_finish {RAY_FAILED_EXIT} ray" in script
    assert script.index("sf_ray_wait") < script.index("bootstrap.sh")


def test_loopback_gives_every_ray_node_its_own_127_address() -> None:
    script = build_script(spec([Component("main", 2, 1)], ray=RaySpec(node_ip="loopback", port=6380)))
    assert "sf_head_ip=127.0.0.2" in script
    assert "scontrol show node" not in script
    assert "sf_ray_port=6380" in script
    (workers,) = [line for line in srun_lines(script) if "sf-ray-worker" in line]
    assert '--node-ip-address="127.0.0.$((2 + i))"' in workers
    assert "sf-ray-worker 1 ray start" in workers


def test_heterogeneous_job_has_one_group_per_pool_and_the_capsule_on_group_0() -> None:
    components = [Component("main", 2, 4), Component("rollout", 3, 2)]
    script = build_script(spec(components, ray=RaySpec(node_ip="loopback")))
    bash_syntax_ok(script)
    head, main_workers, rollout_workers, wait, capsule = srun_lines(script)
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST_HET_GROUP_0"' in script
    assert head.startswith("srun --het-group=0 --nodes=1 --ntasks=1 --overlap")
    assert main_workers.startswith("srun --het-group=0 --nodes=1 --ntasks=1")
    assert "sf-ray-worker 1 " in main_workers and "--num-gpus=4" in main_workers
    assert rollout_workers.startswith("srun --het-group=1 --nodes=3 --ntasks=3 --ntasks-per-node=1 --overlap")
    assert '-x "$sf_head"' not in rollout_workers
    assert "sf-ray-worker 2 " in rollout_workers and "--num-gpus=2" in rollout_workers
    assert "'--resources={\"pool:rollout\":1}'" in rollout_workers
    assert wait.startswith("srun --het-group=0 ") and wait.endswith(" 5 300 &")
    assert capsule.startswith("srun --het-group=0 --nodes=1 --ntasks=1 --overlap")
    assert "5 nodes in all" in script


def test_heterogeneous_job_without_ray_runs_only_the_capsule() -> None:
    script = build_script(spec([Component("main", 1, 1), Component("rollout", 1, 2)]))
    assert srun_lines(script) == ['srun --het-group=0 --nodes=1 --ntasks=1 sh "$FORGE_CAPSULE_DIR/bootstrap.sh" &']


def test_pyxis_steps_run_in_the_image_with_the_shared_dirs_mounted() -> None:
    container = Container(
        "pyxis", "nvcr.io#nvidia/pytorch:24.05-py3", ("/shared:/shared", "/data:/data:ro"), f"{STAGE}/workspace"
    )
    script = build_script(spec([Component("main", 2, 8)], container=container, ray=RaySpec()))
    bash_syntax_ok(script)
    lines = srun_lines(script)
    assert len(lines) == 4
    for line in lines:
        words = shlex.split(line)
        assert "--container-image=nvcr.io#nvidia/pytorch:24.05-py3" in words
        assert "--container-mounts=/shared:/shared,/data:/data:ro" in words
        assert f"--container-workdir={STAGE}/workspace" in words
    assert lines[-1].endswith('sh "$FORGE_CAPSULE_DIR/bootstrap.sh" &')


def test_apptainer_wraps_each_step_and_adds_nv_only_with_gpus() -> None:
    container = Container("apptainer", "/images/trl.sif", ("/shared:/shared",), f"{STAGE}/workspace")
    gpu = build_script(spec([Component("main", 1, 1)], container=container))
    bash_syntax_ok(gpu)
    assert srun_lines(gpu) == [
        "srun --nodes=1 --ntasks=1 apptainer exec --nv --bind /shared:/shared "
        f'--pwd {STAGE}/workspace /images/trl.sif sh "$FORGE_CAPSULE_DIR/bootstrap.sh" &'
    ]
    cpu = build_script(spec([Component("main", 1, 0)], container=container))
    assert "--nv" not in cpu


def test_preamble_comes_before_the_environment() -> None:
    script = build_script(spec([Component("main", 1)], preamble=("module load cuda/12.4",)))
    assert script.index("module load cuda/12.4") < script.index("export FORGE_")


def test_ray_is_for_several_nodes_or_pools() -> None:
    assert not wants_ray([Component("main", 1, 8)])
    assert wants_ray([Component("main", 2, 8)])
    assert wants_ray([Component("main", 1), Component("aux", 1)])


def test_bootstrap_is_checked_against_its_digest_right_before_it_runs() -> None:
    digest = "ab" * 32
    script = build_script(spec([Component("main", 1)], bootstrap_sha256=digest))
    bash_syntax_ok(script)
    check = script.index(f'if [ "$sf_boot" != {digest} ]; then')
    assert check < script.index('sh "$FORGE_CAPSULE_DIR/bootstrap.sh" &')
    assert "sf_finish 97 capsule" in script[check:]
    assert "sf_boot" not in build_script(spec([Component("main", 1)]))
