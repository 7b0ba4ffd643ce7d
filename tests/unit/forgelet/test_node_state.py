"""forgelet's drain state: local drains and the registry's DRAINING/DRAINED/READY."""

from __future__ import annotations

import pathlib

import pytest
from starforge_api.forgelet.v1 import node_pb2

from common import errors
from executor_svc.local.config import LocalConfig, SeriesConfig
from executor_svc.local.executor import LocalExecutor
from forgelet.gpus import discover
from forgelet.node import Node


def make_node(tmp_path: pathlib.Path) -> Node:
    inv = discover("config", "n1", [SeriesConfig("h200", gpus=4, real_gpus=False)], 2)
    ex = LocalExecutor(LocalConfig(state_dir=tmp_path, runtime="process", node_name="n1", inventory=list(inv.series)))
    return Node("n1", "f", "127.0.0.1:1", inv, ex)


def test_registry_and_local_drains(tmp_path: pathlib.Path) -> None:
    n = make_node(tmp_path)
    assert not n.draining
    assert n.proto().state == node_pb2.NODE_STATE_READY
    n.apply_registry_state(node_pb2.NODE_STATE_DRAINING)
    assert n.draining
    with pytest.raises(errors.FailedPrecondition, match="draining") as info:
        n.refuse_if_draining()
    assert info.value.precondition_violations[0].type == "NODE"
    n.apply_registry_state(node_pb2.NODE_STATE_DRAINED)
    assert n.proto().state == node_pb2.NODE_STATE_DRAINING
    n.apply_registry_state(node_pb2.NODE_STATE_READY)  # undrained in the registry
    assert not n.draining
    n.drain_locally()
    n.apply_registry_state(node_pb2.NODE_STATE_READY)  # a local drain the registry never heard of stays
    assert n.draining


def test_node_proto_lists_configured_gpus(tmp_path: pathlib.Path) -> None:
    p = make_node(tmp_path).proto()
    assert (p.name, p.fleet, p.inventory_source, p.version) == ("n1", "f", "config", "0.1.0")
    assert [(g.index, g.uuid, g.series) for g in p.gpus] == [(i, f"cfg-n1-{i}", "h200") for i in range(4)]
