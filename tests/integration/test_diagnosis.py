"""Failed jobs get a classified reason, the relevant last log lines and a hint (sf job status shows them)."""

from __future__ import annotations

import json
import pathlib

from starforge_api.job.v1 import job_state_pb2 as st

from control.diagnosis import HINTS
from tests.integration.console import Console, console

CASES = {
    "user": (
        "#!/usr/bin/env bash\npython3 -c 'raise ValueError(\"bad label column\")'\n",
        st.FAILURE_CLASS_USER_CODE,
        "train.sh exited with code 1",
        "ValueError: bad label column",
    ),
    "oom": (
        "#!/usr/bin/env bash\necho 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB' >&2\nexit 1\n",
        st.FAILURE_CLASS_OUT_OF_MEMORY,
        "",
        "CUDA out of memory",
    ),
    "data": (
        "#!/usr/bin/env bash\npython3 -c 'open(\"data/train.parquet\")'\n",
        st.FAILURE_CLASS_DATA,
        "training data could not be read",
        "No such file or directory: 'data/train.parquet'",
    ),
    "module": (
        "#!/usr/bin/env bash\npython3 -c 'import flash_attn_nonexistent'\n",
        st.FAILURE_CLASS_USER_CODE,
        "train.sh exited with code 1",
        "No module named 'flash_attn_nonexistent'",
    ),
}


async def test_failure_classes_reasons_and_hints(tmp_path: pathlib.Path) -> None:
    async with console(tmp_path) as c:
        jobs = {name: await c.submit_custom(script, experiment=name) for name, (script, *_) in CASES.items()}
        for name, job in jobs.items():
            _, cls, summary, line = CASES[name]
            done = await c.wait(job.job_id, st.JOB_STATE_FAILED, st.JOB_STATE_SUCCEEDED, timeout=60)
            d = done.diagnosis
            assert done.state == st.JOB_STATE_FAILED, name
            assert d.failure_class == cls, (name, d)
            assert summary in d.summary, (name, d.summary)
            assert any(line in ln for ln in d.log_tail), (name, list(d.log_tail))
            if name == "module":
                assert d.hint == (
                    "Python module 'flash_attn_nonexistent' is missing from the image: install it in the image "
                    "or pick one that has it."
                )
            else:
                assert d.hint == HINTS[cls]
            assert not d.retryable
            status = await c.sf_async("job", "status", job.job_id)
            assert d.hint.split(":")[0] in status.stdout.replace("\n", " ") or d.hint[:30] in status.stdout.replace(
                "\n", " "
            )


async def test_a_script_never_git_added_is_named_with_the_fix(tmp_path: pathlib.Path) -> None:
    """train.sh calls a script (and imports a module) the user never `git add`ed: the diagnosis
    names that file, which the job's own provenance lists as untracked, instead of blaming data."""
    async with console(tmp_path) as c:
        lab = await c.lab("exp", "#!/usr/bin/env bash\nset -e\npython3 experiments/exp/prep.py\n")
        (lab / "experiments" / "exp" / "prep.py").write_text("print('prepared')\n")
        r = await c.sf_async("submit", "exp", "--follow", cwd=lab, check=False)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "untracked" in r.stderr, r.stderr
        d = await _diagnosis(c)
        assert d["summary"] == "train.sh needs experiments/exp/prep.py, which git does not track, so it was not packed"
        assert "`git add experiments/exp/prep.py`" in d["hint"]
        assert d["failure_class"] == "FAILURE_CLASS_USER_CODE"
        text = (await c.sf_async("job", "status", "latest")).stdout
        assert "prep.py" in text and "git add" in text
        assert "training data could not be read" not in text and "--train-data" not in text

        lab2 = await c.lab("mod", "#!/usr/bin/env bash\ncd experiments/mod\npython3 -c 'import helpers'\n")
        (lab2 / "experiments" / "mod" / "helpers.py").write_text("X = 1\n")
        await c.sf_async("submit", "mod", "--follow", cwd=lab2, check=False)
        d = await _diagnosis(c)
        assert (
            d["summary"] == "train.sh needs experiments/mod/helpers.py, which git does not track, so it was not packed"
        )
        assert "`git add experiments/mod/helpers.py`" in d["hint"]


async def _diagnosis(c: Console) -> dict[str, str]:
    data = json.loads((await c.sf_async("-o", "json", "job", "status", "latest")).stdout)
    return dict(data.get("job", data)["diagnosis"])
