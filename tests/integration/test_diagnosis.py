"""Failed jobs get a classified reason, the relevant last log lines and a hint (sf job status shows them)."""

from __future__ import annotations

import pathlib

from starforge.job.v1 import job_state_pb2 as st

from control.diagnosis import HINTS
from tests.integration.console import console

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
