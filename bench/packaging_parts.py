"""`python -m bench.packaging_parts`: two per-file costs of `sf`'s first submit of the packaging lab,
in-process, old way against new (CPU seconds, median of 7).

- the `sf submit -o json` document of a 10,000-file workspace: `message_to_dict` and
  `json.dumps(indent=2)` (the standard library's pure-Python encoder) against `job_to_dict` and
  `dumps_indented` (the same text);
- the UploadBlobs messages of the lab's 9,990 small blobs: each blob copied into a message and the
  message serialized, against each message's encoding joined once (`cli.upload._whole_blob`; the
  same bytes).
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from starforge_api.control.v1 import blob_service_pb2 as pb
from starforge_api.job.v1 import job_pb2

from bench.common import log
from cli.output import _json_default, dumps_indented, job_to_dict, message_to_dict
from cli.upload import MESSAGE_BYTES, _whole_blob

FILES, SMALL = 10_000, 9_990


def _cpu(fn: Callable[[], Any]) -> float:
    times = []
    for _ in range(7):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def main() -> int:
    job = job_pb2.Job(job_id="j-1", experiment="exp", method="custom/custom")
    for i in range(FILES):
        job.spec.workspace.files.add(
            path=f"data/shard-{i // 500:02d}/part-{i:05d}.bin", sha256=os.urandom(32).hex(), size=10_240 + i
        )
    blobs = [(hashlib.sha256(str(i).encode()).hexdigest(), os.urandom(9_728 + i % 1024)) for i in range(SMALL)]

    def old_doc() -> str:
        return json.dumps({"job": message_to_dict(job)}, indent=2, default=_json_default)

    def new_doc() -> str:
        return dumps_indented({"job": job_to_dict(job)}, _json_default)

    def old_messages() -> list[bytes]:
        out, message, size = [], pb.UploadBlobsRequest(), 0
        for digest, data in blobs:
            if size + len(data) > MESSAGE_BYTES and size:
                out.append(message.SerializeToString())
                message, size = pb.UploadBlobsRequest(), 0
            message.blobs.add(digest=digest, data=data)
            size += len(data)
        return [*out, message.SerializeToString()]

    def new_messages() -> list[bytes]:
        out: list[bytes] = []
        parts: list[bytes] = []
        size = 0
        for digest, data in blobs:
            if size + len(data) > MESSAGE_BYTES and size:
                out.append(b"".join(parts))
                parts, size = [], 0
            parts += _whole_blob(digest, data)
            size += len(data)
        return [*out, b"".join(parts)]

    assert old_doc() == new_doc()
    assert old_messages() == new_messages()
    log(f"-o json document, {FILES} files: {_cpu(old_doc):.3f} s -> {_cpu(new_doc):.3f} s of CPU")
    log(f"UploadBlobs messages, {SMALL} small blobs: {_cpu(old_messages):.3f} s -> {_cpu(new_messages):.3f} s of CPU")
    log(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
