"""forgelet and agent executor configuration: files, environment, refusals."""

from __future__ import annotations

import pathlib

import pytest

from common.config import ConfigError
from executor_svc.agent.config import AgentConfig
from executor_svc.config import load_service_config
from forgelet import config as fcfg

FORGELET_YAML = """\
name: n1
fleet: gpu
listen: 127.0.0.1:7072
control_address: 127.0.0.1:7070
token_file: {token}
executor_token: sekret
discovery: config
inventory:
  - {{series: h200, gpus: 8, real_gpus: false}}
local:
  runtime: docker
  state_dir: {state}
  docker: {{base_url: unix:///run/d.sock}}
  job_uid_range: [200000, 265535]
"""


def test_forgelet_config_file_and_environment(tmp_path: pathlib.Path) -> None:
    (tmp_path / "tok").write_text("sfn_x\n")
    path = tmp_path / "forgelet.yaml"
    path.write_text(FORGELET_YAML.format(token=tmp_path / "tok", state=tmp_path / "st"))
    cfg = fcfg.load(path, {"STARFORGE_FORGELET_CPU_SLOTS": "3", "STARFORGE_FORGELET_LOCAL__RUNTIME": "process"})
    assert (cfg.node_name, cfg.fleet, cfg.cpu_slots, cfg.local.runtime) == ("n1", "gpu", 3, "process")
    assert cfg.registry_token() == "sfn_x"
    assert cfg.forgelet_token() == "sekret"
    local = cfg.local_config(list(cfg.inventory))
    assert (local.node_name, local.state_dir, local.docker.base_url) == ("n1", tmp_path / "st", "unix:///run/d.sock")
    assert local.inventory[0].real_gpus is False
    assert local.job_uid_range == [200000, 265535]  # the node's process runtime isolates jobs too


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: n1\n", "fleet: required"),
        ("fleet: f\n", "executor_token .*: required"),
        ("fleet: f\nexecutor_token: x\ndiscovery: magic\n", "discovery: 'magic'"),
        ("fleet: f\nexecutor_token: x\nlocal: {runtime: podman}\n", "local.runtime: 'podman'"),
        ("fleet: f\nexecutor_token: x\ntoken: a\ntoken_file: b\n", "set one, not both"),
        ("fleet: f\nheartbeat: 3\n", "unknown key 'heartbeat'"),
        ("fleet: f\nexecutor_token: x\ndiscovery: config\ncpu_slots: 0\n", "list the node's GPUs"),
    ],
)
def test_forgelet_config_refusals(tmp_path: pathlib.Path, text: str, message: str) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        fcfg.load(path, {})


def test_forgelet_unreadable_token_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "f.yaml"
    path.write_text(f"fleet: f\nexecutor_token: x\ntoken_file: {tmp_path / 'missing'}\n")
    with pytest.raises(ConfigError, match="token_file: cannot read"):
        fcfg.load(path, {}).registry_token()


def test_agent_section(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "executor.yaml"
    path.write_text(f"token: t\nagent:\n  fleet: gpu\n  control_address: 127.0.0.1:7070\n  state_dir: {tmp_path}\n")
    cfg = load_service_config("agent", AgentConfig, path, {"STARFORGE_EXECUTOR_AGENT__FORGELET_TOKEN": "ft"})
    assert (cfg.agent.fleet, cfg.agent.runtime, cfg.agent.node_token()) == ("gpu", "docker", "ft")
    path.write_text("agent:\n  control_address: 127.0.0.1:7070\n")
    with pytest.raises(ConfigError, match=r"agent.fleet: required"):
        load_service_config("agent", AgentConfig, path, {})
    path.write_text("agent:\n  fleet: gpu\n  control_address: x:1\n  runtime: slurm\n")
    with pytest.raises(ConfigError, match=r"agent\.runtime: 'slurm'"):
        load_service_config("agent", AgentConfig, path, {})
