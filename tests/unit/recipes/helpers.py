"""Building an adapter's input the way a job gets it: the server resolves the method's config
(recipe defaults <- config.yaml <- -s overrides) and the runner reads it from capsule.json."""

from __future__ import annotations

import pathlib
import stat
from collections.abc import Mapping, Sequence
from typing import Any

from starforge_api.job.v1 import job_spec_pb2

from capsule.runner.adapters import AdapterContext, CommandSpec, get_adapter
from capsule.runner.capsule_file import RunSpec
from control.assembly import entrypoint
from recipes.catalog import RecipeDecl, load_catalog
from recipes.params import resolve_config

CATALOG = load_catalog()


def recipe(name: str) -> RecipeDecl:
    found = CATALOG.get(name)
    assert found is not None, name
    return found


def resolved(
    method: str, config: Mapping[str, Any] | None = None, overrides: Sequence[str] = (), framework_version: str = ""
) -> dict[str, Any]:
    ovs = [job_spec_pb2.Override(key=o.split("=", 1)[0], value=o.split("=", 1)[1]) for o in overrides]
    return resolve_config(recipe(method), dict(config or {}), ovs, framework_version)


def pool(name: str, series: str, nodes: int, gpus: int) -> dict[str, Any]:
    return {"name": name, "series": series, "nodes": nodes, "gpus_per_node": gpus}


class Job:
    """A workspace, scratch and out dir under tmp_path, plus a PATH with fake framework CLIs."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.workspace = root / "ws"
        self.scratch = root / "scratch"
        self.out = root / "out"
        self.bin = root / "bin"
        for d in (self.workspace, self.scratch, self.out, self.bin):
            d.mkdir(parents=True, exist_ok=True)
        self.environ: dict[str, str] = {"FORGE_OUT_DIR": str(self.out), "PATH": str(self.bin)}

    def file(self, rel: str, text: str = "x\n") -> pathlib.Path:
        path = self.workspace / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def tool(self, name: str) -> None:
        path = self.bin / name
        path.write_text("#!/bin/sh\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)

    def command(
        self,
        method: str,
        *,
        config: Mapping[str, Any] | None = None,
        overrides: Sequence[str] = (),
        model: str = "",
        train_data: str = "",
        validation_data: str = "",
        pools: Sequence[Mapping[str, Any]] = (),
        experiment: str = "exp",
        stage: str = "",
        **environ: str,
    ) -> CommandSpec:
        decl = recipe(method)
        run = RunSpec(
            method=method,
            adapter=decl.adapter,
            experiment=experiment,
            entrypoint=entrypoint(decl, experiment, stage),
            stage=stage or "train",
            config=resolved(method, config, overrides),
            model=model,
            train_data=train_data,
            validation_data=validation_data,
            pools=[dict(p) for p in (pools or [pool("main", "h100", 1, 1)])],
        )
        ctx = AdapterContext(
            run=run,
            capsule_dir=self.root / "capsule",
            workspace_dir=self.workspace,
            scratch_dir=self.scratch,
            config_path=self.scratch / "config.json",
            environ={**self.environ, **environ},
        )
        return get_adapter(decl.adapter).command(ctx)

    def rel(self, argv: Sequence[str]) -> list[str]:
        """argv with this job's directories written as <ws>, <scratch>, <out> (goldens stay readable)."""
        out = []
        for word in argv:
            text = word
            for path, mark in ((self.workspace, "<ws>"), (self.scratch, "<scratch>"), (self.out, "<out>")):
                text = text.replace(str(path), mark)
            out.append(text)
        return out
