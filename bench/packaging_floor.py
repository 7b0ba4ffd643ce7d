"""`python -m bench.packaging_floor`: floors of the first submit's console side on this machine, for the
packaging row (bench/packaging.py's lab, made if missing).

- store: the lab's blobs, already in memory, through BlobStore.put_many in batches as UploadBlobs
  makes them (sha256 of every byte; the small blobs of a batch as one pack, its index and three
  fsyncs; the large ones a temporary file each, one syncfs for the contents and one for the names,
  the renames), in a new store (which packs), in this process, no gRPC: CPU and wall.
- receive: a bare grpc.aio server (its own process) with one client-streaming method and no
  interceptors receives the lab as the UploadBlobs messages `sf` sends (small files whole in 2 MiB
  messages, large ones in 1 MiB chunks), serialized beforehand and sent from a sync client as `sf`
  does: the server's CPU with raw bytes (`raw`: no protobuf) and with each message parsed and every
  blob's bytes taken out (`proto`, as the servicer does), and the client's.

Prints the figures as JSON. `--serve READY MODE` is the server.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
from typing import Any

import grpc
from starforge_api.control.v1 import blob_service_pb2 as pb

from bench.common import cpu_seconds_of, fresh_dir, log, stop_pid
from bench.packaging import LAB, ensure_data
from control.blobstore import BlobStore
from control.services.blob_service import BATCH_BLOBS, BATCH_BYTES

METHOD = "/bench.Floor/Upload"
CHUNK, MESSAGE_BYTES = 1 << 20, 2 << 20  # cli/upload.py's


def _lab() -> list[bytes]:
    ensure_data()
    return [p.read_bytes() for p in sorted((LAB / "data").rglob("*.bin"))]


def _messages(blobs: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    msg, size = pb.UploadBlobsRequest(), 0
    for data in blobs:
        digest = hashlib.sha256(data).hexdigest()
        if len(data) < CHUNK:
            if size + len(data) > MESSAGE_BYTES and size:
                out.append(msg.SerializeToString())
                msg, size = pb.UploadBlobsRequest(), 0
            msg.blobs.add(digest=digest, data=data)
            size += len(data)
            continue
        for at in range(0, len(data), CHUNK):
            part = data[at : at + CHUNK]
            out.append(
                pb.UploadBlobsRequest(
                    digest=digest, size=len(data) if at == 0 else 0, data=part, finish=at + CHUNK >= len(data)
                ).SerializeToString()
            )
    if size:
        out.append(msg.SerializeToString())
    return out


def store_floor(blobs: list[bytes]) -> dict[str, float]:
    root = fresh_dir("packaging-floor") / "blobs"
    store = BlobStore(root)
    whole = [(hashlib.sha256(d).hexdigest(), d) for d in blobs]
    c0, t0 = time.process_time(), time.monotonic()
    batch: list[tuple[str, bytes]] = []
    size = 0
    for digest, data in whole:
        batch.append((digest, data))
        size += len(data)
        if size >= BATCH_BYTES or len(batch) >= BATCH_BLOBS:
            store.put_many(batch)
            batch, size = [], 0
    store.put_many(batch)
    cpu, wall = time.process_time() - c0, time.monotonic() - t0
    shutil.rmtree(root)
    return {"store_cpu_s": cpu, "store_wall_s": wall}


async def _serve(ready: pathlib.Path, mode: str) -> None:
    async def upload(requests: Any, context: Any) -> bytes:
        n = 0
        async for raw in requests:
            if mode == "raw":
                n += len(raw)
                continue
            msg = pb.UploadBlobsRequest.FromString(raw)
            for blob in msg.blobs:
                n += len(blob.data)
            n += len(msg.data)
        return str(n).encode()

    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 4 << 20)])
    handler = grpc.stream_unary_rpc_method_handler(upload)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("bench.Floor", {"Upload": handler})])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    ready.write_text(str(port))  # noqa: ASYNC240 (once, before serving)
    await server.wait_for_termination()


def receive_floor(messages: list[bytes], mode: str) -> dict[str, float]:
    ready = fresh_dir(f"packaging-floor-{mode}") / "port"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.packaging_floor", "--serve", str(ready), mode], start_new_session=True
    )
    try:
        while not ready.exists() or not ready.read_text():
            if proc.poll() is not None:
                raise RuntimeError("the floor server did not start")
            time.sleep(0.05)
        with grpc.insecure_channel(f"127.0.0.1:{ready.read_text()}") as ch:
            call = ch.stream_unary(METHOD, request_serializer=None, response_deserializer=None)
            call(iter(messages[:2]))  # warm the connection
            s0, c0, t0 = cpu_seconds_of([proc.pid]), time.process_time(), time.monotonic()
            got = int(call(iter(messages)))
            wall, client = time.monotonic() - t0, time.process_time() - c0
            server = cpu_seconds_of([proc.pid]) - s0
    finally:
        stop_pid(proc, 5)
    return {f"{mode}_server_cpu_s": server, f"{mode}_client_cpu_s": client, f"{mode}_wall_s": wall, "bytes": got}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.packaging_floor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", nargs=2, metavar=("READY", "MODE"))
    args = parser.parse_args(argv)
    if args.serve:
        asyncio.run(_serve(pathlib.Path(args.serve[0]), args.serve[1]))
        return 0
    blobs = _lab()
    out: dict[str, float] = {"lab_bytes": float(sum(map(len, blobs))), "files": float(len(blobs))}
    c0 = time.process_time()
    for data in blobs:
        hashlib.sha256(data).digest()
    out["sha256_cpu_s"] = time.process_time() - c0
    out.update(store_floor(blobs))
    messages = _messages(blobs)
    for mode in ("raw", "proto"):
        out.update(receive_floor(messages, mode))
    out["load_1min"] = os.getloadavg()[0]
    log("packaging floor: " + json.dumps({k: round(v, 3) for k, v in out.items()}))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
