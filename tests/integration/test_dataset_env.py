"""`<NAME>_DATA_DIR` for platform datasets, besides TRAIN_DATA_DIR / VALIDATION_DATA_DIR, through `sf`."""

from __future__ import annotations

import json
import pathlib

from starforge_api.job.v1 import job_state_pb2 as st

from tests.integration.console import Console, console

PRINT_ENV = """#!/usr/bin/env bash
python3 - <<'PY'
import json, os
dirs = {k: v for k, v in os.environ.items() if k.endswith("_DATA_DIR")}
print("DIRS " + json.dumps(dirs, sort_keys=True), flush=True)
print("FILES " + json.dumps({k: sorted(os.listdir(v)) for k, v in dirs.items()}, sort_keys=True), flush=True)
PY
"""


async def _push(c: Console, tmp: pathlib.Path, name: str, version: str, filename: str) -> None:
    data = tmp / f"{name}-{version}"
    data.mkdir(parents=True)
    (data / filename).write_text("{}\n")
    await c.sf_async("dataset", "push", name, str(data), "--version", version)


async def _run(c: Console, lab: pathlib.Path, *args: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    r = await c.sf_async("-o", "json", "submit", "exp", *args, cwd=lab)
    job_id = json.loads(r.stdout)["job"]["job_id"]
    done = await c.wait(job_id, st.JOB_STATE_SUCCEEDED, st.JOB_STATE_FAILED, timeout=90)
    assert done.state == st.JOB_STATE_SUCCEEDED, done.diagnosis
    lines = await c.logs(job_id)
    dirs = json.loads(next(ln for ln in lines if ln.startswith("DIRS "))[5:])
    files = json.loads(next(ln for ln in lines if ln.startswith("FILES "))[6:])
    return dirs, files


async def test_datasets_get_a_variable_by_name_and_by_role(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        await _push(c, tmp_path, "gsm8k-zh.v2", "v1", "train.jsonl")
        await _push(c, tmp_path, "eval-set", "v1", "val.jsonl")
        await _push(c, tmp_path, "eval-set", "v2", "val2.jsonl")
        await _push(c, tmp_path, "train", "v1", "other.jsonl")
        val = {"dataset": "admin/eval-set@v1", "path": "val.jsonl"}
        lab = await c.lab("exp", PRINT_ENV, config={"data": {"validation": val}})
        dirs, files = await _run(c, lab, "--train-dataset", "admin/gsm8k-zh.v2@v1", "--train-data", "train.jsonl")
        assert set(dirs) == {"TRAIN_DATA_DIR", "VALIDATION_DATA_DIR", "GSM8K_ZH_V2_DATA_DIR", "EVAL_SET_DATA_DIR"}
        assert dirs["GSM8K_ZH_V2_DATA_DIR"] == dirs["TRAIN_DATA_DIR"]
        assert dirs["EVAL_SET_DATA_DIR"] == dirs["VALIDATION_DATA_DIR"]
        assert files["GSM8K_ZH_V2_DATA_DIR"] == ["train.jsonl"] and files["EVAL_SET_DATA_DIR"] == ["val.jsonl"]

        # Clashes: a dataset named "train" does not override the role variable; two versions of
        # eval-set (train and validation) leave EVAL_SET_DATA_DIR unset, the roles still set.
        dirs, files = await _run(c, lab, "--train-dataset", "admin/eval-set@v2", "--train-data", "val2.jsonl")
        assert set(dirs) == {"TRAIN_DATA_DIR", "VALIDATION_DATA_DIR"}
        assert files == {"TRAIN_DATA_DIR": ["val2.jsonl"], "VALIDATION_DATA_DIR": ["val.jsonl"]}
        dirs, files = await _run(c, lab, "--train-dataset", "admin/train@v1", "--train-data", "other.jsonl")
        assert set(dirs) == {"TRAIN_DATA_DIR", "VALIDATION_DATA_DIR", "EVAL_SET_DATA_DIR"}
        assert files["TRAIN_DATA_DIR"] == ["other.jsonl"]
