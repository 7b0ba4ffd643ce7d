"""The batch script of one attempt (a pure function of `ScriptSpec`: no I/O, unit-tested).

What the script does, in order:

1. the fleet's preamble (`module load ...`), then `export` of the capsule's non-secret
   environment (docs/ARCHITECTURE.md, "The capsule"). Secrets (FORGE_INGEST_TOKEN, the request's
   secret_env) are never in this text: Slurm keeps a job's script readable (`scontrol write
   batch_script`) and the executor writes a copy on the shared file system, so they travel in
   the job's `environment` of the REST submission instead, which srun passes on to every step;
2. `started` and, at the end, `outcome` (exit code, signal, time, phase) in the attempt's
   staging dir: slurmctld forgets an ended job after MinJobAge (300 s without accounting), and
   the executor then reads the outcome from there;
3. for multi-node or multi-pool jobs with Ray on: a Ray head (`ray start --head --block`) on the
   first node of pool 0, a worker on every other node (of every component of a heterogeneous
   job), then a readiness check that waits until every node joined (exit 96 if not: the
   capsule never ran, the failure is the platform's);
4. the capsule, `sh $FORGE_CAPSULE_DIR/bootstrap.sh`, as one task on the first node of pool 0,
   through the fleet's container runtime (pyxis `srun --container-image`, `apptainer exec`) or
   bare on the host; the script's exit code is the capsule's. Right before, the script checks
   bootstrap.sh against the digest the executor verified (exit 97 on a mismatch, as bootstrap's
   own integrity failures): bootstrap.sh checks everything else, so nothing changed runs.

When the script ends, Slurm ends the remaining steps (the Ray nodes) itself.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

OUTCOME_FILE = "outcome"
STARTED_FILE = "started"
RAY_FAILED_EXIT = 96  # the Ray cluster did not come up; bootstrap owns 97 and 98
PRECHECK_EXIT = 97  # bootstrap.sh itself does not match its digest (bootstrap's own integrity code)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_POOL = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class Component:
    """One pool as a job component (a heterogeneous job has one per pool; pools[0] first)."""

    pool: str
    nodes: int
    gpus_per_node: int = 0
    cpus_per_node: int = 0


@dataclass(frozen=True)
class Container:
    """How steps enter the image: `pyxis` (srun options) or `apptainer` (a command prefix)."""

    runtime: str
    image: str
    # "/src:/dst[:ro]" bind mounts; the staging and out dirs at their own paths at least.
    mounts: tuple[str, ...] = ()
    workdir: str = ""
    apptainer_command: str = "apptainer"


@dataclass(frozen=True)
class RaySpec:
    """Ray settings for one job (see config.RayConfig)."""

    command: str = "ray"
    node_ip: str = "auto"
    port: int = 0
    start_timeout_seconds: int = 300
    object_store_memory_bytes: int = 0
    temp_dir: str = "/tmp/sf-ray"
    extra_start_args: tuple[str, ...] = ()
    python: str = "python3"
    token_auth: bool = True


@dataclass(frozen=True)
class ScriptSpec:
    attempt_id: str
    job_id: str
    # <staging>/<attempt>: the outcome and started markers go here.
    stage_dir: str
    # Exported in the script: the capsule's environment minus secrets.
    exports: Mapping[str, str]
    components: Sequence[Component]
    # Names (never values) of the variables that come with the job's environment instead.
    secret_names: Sequence[str] = ()
    container: Container | None = None
    ray: RaySpec | None = None
    preamble: Sequence[str] = ()
    # sha256 of bootstrap.sh from the capsule manifest; empty: not checked by the script.
    bootstrap_sha256: str = ""

    @property
    def heterogeneous(self) -> bool:
        return len(self.components) > 1


def wants_ray(components: Sequence[Component]) -> bool:
    """Ray is started for jobs with several nodes or several pools."""
    return len(components) > 1 or any(c.nodes > 1 for c in components)


def build_script(spec: ScriptSpec) -> str:
    """The whole batch script (see the module docstring)."""
    if not spec.components:
        raise ValueError("a job needs at least one component")
    bad = [name for name in spec.exports if not _NAME.match(name)]
    if bad:
        raise ValueError(f"cannot export {bad[0]!r} from a shell script; pass it with the job's environment")
    lines = _header(spec)
    if spec.ray is not None:
        lines += _ray_section(spec, spec.ray)
    lines += _capsule_section(spec)
    return "\n".join(lines) + "\n"


def _header(spec: ScriptSpec) -> list[str]:
    q = shlex.quote
    lines = [
        "#!/bin/bash",
        f"# StarForge attempt {spec.attempt_id} of job {spec.job_id}, written by the slurm executor.",
        "# Secrets are not in this file: they come with the job's environment"
        + (f" ({', '.join(sorted(spec.secret_names))})." if spec.secret_names else "."),
        "set -u",
    ]
    if spec.preamble:
        lines += ["", "# --- fleet preamble ---", *spec.preamble]
    lines += ["", "# --- the capsule's environment ---"]
    lines += [f"export {name}={q(value)}" for name, value in sorted(spec.exports.items())]
    lines += [
        "",
        f"SF_STAGE={q(spec.stage_dir)}",
        "sf_signal=",
        "trap 'sf_signal=TERM' TERM",
        "trap 'sf_signal=INT' INT",
        "",
        "# The outcome outlives slurmctld's memory of the job: the executor reads it afterwards.",
        "sf_finish() {",
        '\tprintf \'exit_code=%s\\nsignal=%s\\nended_at=%s\\nphase=%s\\n\' "$1" "$sf_signal" "$(date +%s)" '
        f'"$2" >"$SF_STAGE/{OUTCOME_FILE}.tmp" &&',
        f'\t\tmv -f "$SF_STAGE/{OUTCOME_FILE}.tmp" "$SF_STAGE/{OUTCOME_FILE}"',
        '\texit "$1"',
        "}",
        "",
        "# Wait for a background step; a trapped signal interrupts `wait`, so wait again while it runs.",
        "sf_wait() {",
        "\twhile :; do",
        '\t\twait "$1"',
        "\t\tsf_rc=$?",
        '\t\tif [ "$sf_rc" -gt 128 ] && kill -0 "$1" 2>/dev/null; then continue; fi',
        '\t\treturn "$sf_rc"',
        "\tdone",
        "}",
        "",
        f'date +%s >"$SF_STAGE/{STARTED_FILE}"',
    ]
    return lines


def _group(spec: ScriptSpec, index: int) -> list[str]:
    return [f"--het-group={index}"] if spec.heterogeneous else []


def _cpus(component: Component) -> list[str]:
    return [f"--cpus-per-task={component.cpus_per_node}"] if component.cpus_per_node else []


def _step(spec: ScriptSpec, srun_opts: Sequence[str], command: Sequence[str], gpus: int) -> str:
    """`srun OPTS [container] COMMAND` with the container runtime's options applied.

    Items of `srun_opts` and `command` are shell words, already quoted where needed.
    """
    q = shlex.quote
    opts = list(srun_opts)
    prefix: list[str] = []
    c = spec.container
    if c is not None and c.runtime == "pyxis":
        opts.append(f"--container-image={q(c.image)}")
        if c.mounts:
            opts.append(f"--container-mounts={q(','.join(c.mounts))}")
        if c.workdir:
            opts.append(f"--container-workdir={q(c.workdir)}")
    elif c is not None and c.runtime == "apptainer":
        prefix = [*map(q, shlex.split(c.apptainer_command)), "exec"]
        if gpus > 0:
            prefix.append("--nv")
        if c.mounts:
            prefix += ["--bind", q(",".join(c.mounts))]
        if c.workdir:
            prefix += ["--pwd", q(c.workdir)]
        prefix.append(q(c.image))
    return " ".join(["srun", *opts, *prefix, *command])


def _ray_start_args(ray: RaySpec, component: Component) -> list[str]:
    """`ray start` arguments every node gets (quoted words)."""
    q = shlex.quote
    args = ["--block", "--disable-usage-stats", f"--num-gpus={component.gpus_per_node}"]
    if ray.object_store_memory_bytes:
        args.append(f"--object-store-memory={ray.object_store_memory_bytes}")
    if _POOL.match(component.pool):
        # Tasks can target a pool's nodes with resources={"pool:<name>": 0.001}.
        args.append(q("--resources=" + json.dumps({f"pool:{component.pool}": 1}, separators=(",", ":"))))
    return args + [q(a) for a in ray.extra_start_args]


def _ray_section(spec: ScriptSpec, ray: RaySpec) -> list[str]:
    """Start a Ray cluster over the job's nodes and wait until every node joined it."""
    ray_cmd = [shlex.quote(w) for w in shlex.split(ray.command)]
    total = sum(c.nodes for c in spec.components)
    return [
        *_ray_preamble(spec, ray),
        *_ray_head_address(ray),
        *_ray_token(ray),
        *_ray_exports(ray, total),
        *_ray_head(spec, ray, ray_cmd),
        *_ray_workers(spec, ray, ray_cmd),
        *_ray_wait_ready(spec, ray, total),
    ]


def _ray_preamble(spec: ScriptSpec, ray: RaySpec) -> list[str]:
    """The node list, the head node and the port."""
    nodelist = "SLURM_JOB_NODELIST_HET_GROUP_0" if spec.heterogeneous else "SLURM_JOB_NODELIST"
    return [
        "",
        f"# --- Ray: a head on the first node of pool {spec.components[0].pool}, a worker on every other node ---",
        "export RAY_USAGE_STATS_ENABLED=0",
        f'sf_nodes=($(scontrol show hostnames "${nodelist}"))',
        'sf_head="${sf_nodes[0]}"',
        f"sf_ray_port={ray.port}" if ray.port else "sf_ray_port=$((20000 + SLURM_JOB_ID % 20000))",
    ]


def _ray_head_address(ray: RaySpec) -> list[str]:
    """sf_head_ip: a loopback address on test clusters, else the head node's resolved NodeAddr."""
    if ray.node_ip == "loopback":
        return [
            "# Test clusters whose nodes share one host: every Ray node on its own 127.0.0.x.",
            "sf_head_ip=127.0.0.2",
        ]
    return [
        "sf_head_addr=$(scontrol show node \"$sf_head\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')",
        "sf_head_ip=$(getent ahostsv4 \"$sf_head_addr\" | awk 'NR == 1 {print $1}')",
        'if [ -z "$sf_head_ip" ]; then',
        '\techo "starforge: cannot resolve the address of the Ray head $sf_head (NodeAddr $sf_head_addr)" >&2',
        f"\tsf_finish {RAY_FAILED_EXIT} ray",
        "fi",
    ]


def _ray_token(ray: RaySpec) -> list[str]:
    """Ray's token authentication, with a token made in the job (when configured)."""
    if not ray.token_auth:
        return []
    return [
        "# A token only this job's processes know (made here, never written down).",
        "export RAY_AUTH_MODE=token",
        "RAY_AUTH_TOKEN=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \\n')",
        "export RAY_AUTH_TOKEN",
    ]


def _ray_exports(ray: RaySpec, total: int) -> list[str]:
    """RAY_ADDRESS and the per-job temp dir, announced in the log."""
    return [
        'export RAY_ADDRESS="$sf_head_ip:$sf_ray_port"',
        f'export SF_RAY_TMP={shlex.quote(ray.temp_dir)}-"$SLURM_JOB_ID"',
        f'echo "starforge: starting Ray: head $sf_head at $RAY_ADDRESS, {total} nodes in all" >&2',
    ]


def _ray_head(spec: ScriptSpec, ray: RaySpec, ray_cmd: list[str]) -> list[str]:
    """The head as a background step, then a wait until its GCS port answers."""
    head_c = spec.components[0]
    head_opts = [*_group(spec, 0), "--nodes=1", "--ntasks=1", "--overlap", '-w "$sf_head"', *_cpus(head_c)]
    head_cmd = [
        *ray_cmd,
        "start",
        "--head",
        '--node-ip-address="$sf_head_ip"',
        '--port="$sf_ray_port"',
        "--include-dashboard=false",
        '--temp-dir="$SF_RAY_TMP/n0"',
        *_ray_start_args(ray, head_c),
    ]
    return [
        _step(spec, head_opts, head_cmd, head_c.gpus_per_node) + " &",
        "sf_ray_steps=$!",
        "# Workers start once the head's GCS answers: nodes starting all at once slow each other down",
        "# past Ray's own start-up timeouts on busy hosts.",
        f"sf_ray_deadline=$((SECONDS + {ray.start_timeout_seconds}))",
        'until (exec 3<>"/dev/tcp/$sf_head_ip/$sf_ray_port") 2>/dev/null; do',
        '\tif ! kill -0 "$sf_ray_steps" 2>/dev/null || [ "$SECONDS" -ge "$sf_ray_deadline" ]; then',
        '\t\techo "starforge: the Ray head did not start at $RAY_ADDRESS (its lines are above)" >&2',
        f"\t\tsf_finish {RAY_FAILED_EXIT} ray",
        "\tfi",
        "\tsleep 1",
        "done",
    ]


def _ray_workers(spec: ScriptSpec, ray: RaySpec, ray_cmd: list[str]) -> list[str]:
    """A worker step per component over every node but the head.

    One task per node; each computes its node index (and loopback address) from the index of
    its first node plus its own SLURM_PROCID.
    """
    ip_arg = ' --node-ip-address="127.0.0.$((2 + i))"' if ray.node_ip == "loopback" else ""
    snippet = shlex.quote(f'i=$(($1 + SLURM_PROCID)); shift; exec "$@"{ip_arg} --temp-dir="$SF_RAY_TMP/n$i"')
    lines: list[str] = []
    first = 1
    for index, comp in enumerate(spec.components):
        count = comp.nodes - 1 if index == 0 else comp.nodes
        if count <= 0:
            continue
        opts = [*_group(spec, index), f"--nodes={count}", f"--ntasks={count}", "--ntasks-per-node=1", "--overlap"]
        if index == 0:
            opts.append('-x "$sf_head"')
        opts += _cpus(comp)
        cmd = ["sh", "-c", snippet, "sf-ray-worker", str(first), *ray_cmd, "start", '--address="$RAY_ADDRESS"']
        cmd += _ray_start_args(ray, comp)
        lines += [_step(spec, opts, cmd, comp.gpus_per_node) + " &", 'sf_ray_steps="$sf_ray_steps $!"']
        first += count
    return lines


def _ray_wait_ready(spec: ScriptSpec, ray: RaySpec, total: int) -> list[str]:
    """Wait on the head until `total` nodes joined; a Ray node that exits first ends the attempt."""
    wait_opts = [*_group(spec, 0), "--nodes=1", "--ntasks=1", "--overlap", '-w "$sf_head"']
    wait_cmd = [shlex.quote(w) for w in shlex.split(ray.python)] + [
        '-c "$sf_ray_wait_py"',
        str(total),
        str(ray.start_timeout_seconds),
    ]
    return [
        "sf_ray_wait_py=$(cat <<'SF_PY'",
        _RAY_WAIT_PY.strip(),
        "SF_PY",
        ")",
        _step(spec, wait_opts, wait_cmd, 0) + " &",
        "sf_ray_wait=$!",
        "# A Ray node that exits before the cluster is ready ends the attempt at once.",
        'while kill -0 "$sf_ray_wait" 2>/dev/null; do',
        "\tfor sf_pid in $sf_ray_steps; do",
        '\t\tif ! kill -0 "$sf_pid" 2>/dev/null; then',
        '\t\t\techo "starforge: a Ray node exited before the cluster was ready (its lines are above)" >&2',
        '\t\t\tkill "$sf_ray_wait" 2>/dev/null',
        f"\t\t\tsf_finish {RAY_FAILED_EXIT} ray",
        "\t\tfi",
        "\tdone",
        "\tsleep 1",
        "done",
        f'sf_wait "$sf_ray_wait" || sf_finish {RAY_FAILED_EXIT} ray',
    ]


def _capsule_section(spec: ScriptSpec) -> list[str]:
    head = spec.components[0]
    opts = [*_group(spec, 0), "--nodes=1", "--ntasks=1"]
    if spec.ray is not None:
        opts += ["--overlap", '-w "$sf_head"']
    opts += _cpus(head)
    command = ["sh", '"$FORGE_CAPSULE_DIR/bootstrap.sh"']
    return [
        "",
        f"# --- the capsule, one task on the first node of pool {head.pool} ---",
        *_bootstrap_check(spec.bootstrap_sha256),
        _step(spec, opts, command, head.gpus_per_node) + " &",
        'sf_wait "$!"',
        "sf_finish $? capsule",
    ]


def _bootstrap_check(digest: str) -> list[str]:
    """Refuse to run a bootstrap.sh whose content is not the manifest's (exit 97, PRECHECK)."""
    if not re.fullmatch(r"[0-9a-f]{64}", digest):
        return []
    return [
        "sf_boot=$(sha256sum \"$FORGE_CAPSULE_DIR/bootstrap.sh\" 2>/dev/null | cut -d' ' -f1)",
        f'if [ "$sf_boot" != {digest} ]; then',
        '\techo "starforge: capsule integrity check failed: capsule/bootstrap.sh: expected sha256 '
        f'{digest}, found ${{sf_boot:-nothing}}; refusing to run it" >&2',
        f"\tsf_finish {PRECHECK_EXIT} capsule",
        "fi",
    ]


# Run on the head node (in the image) until every Ray node joined; argv: nodes, timeout seconds.
_RAY_WAIT_PY = """
import os, sys, time
import ray
want, limit = int(sys.argv[1]), float(sys.argv[2])
deadline = time.monotonic() + limit
address = os.environ["RAY_ADDRESS"]
while True:
    try:
        ray.init(address=address, logging_level="ERROR", log_to_driver=False)
        break
    except Exception as exc:
        if time.monotonic() > deadline:
            sys.exit(f"starforge: no Ray head at {address} after {limit:.0f} s: {exc}")
        time.sleep(2)
while True:
    alive = sum(1 for node in ray.nodes() if node["Alive"])
    if alive >= want:
        print(f"starforge: Ray cluster ready at {address}: {alive} nodes", file=sys.stderr)
        break
    if time.monotonic() > deadline:
        sys.exit(f"starforge: {alive} of {want} Ray nodes joined {address} within {limit:.0f} s")
    time.sleep(1)
"""
