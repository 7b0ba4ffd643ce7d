"""A real BlobService (blob store + SQLite ledger + token auth) on a free port, for executor tests."""

from __future__ import annotations

import contextlib
import pathlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from starforge_api.control.v1 import blob_service_pb2, blob_service_pb2_grpc

from common.server import create_server, service
from control import auth
from control.blob_access import BlobAccess
from control.blobstore import BlobStore
from control.db import migrate
from control.db.engine import Database
from control.services.blob_service import BlobServicer


@dataclass
class BlobServer:
    address: str
    token: str
    store: BlobStore


@contextlib.asynccontextmanager
async def blob_server(root: pathlib.Path) -> AsyncIterator[BlobServer]:
    """Serve a BlobService on 127.0.0.1:<free>; yields its address, a valid token and the store."""
    db = Database(f"sqlite:///{root / 'ledger.db'}")
    migrate.upgrade(db.engine)

    def make_token(s: object) -> str:
        auth.create_user(s, "tester", admin=True)  # type: ignore[arg-type]
        token, _ = auth.issue_token(s, "tester", "pat", name="tests")  # type: ignore[arg-type]
        return token

    token = db.run_sync(make_token)
    store = BlobStore(root / "blobs")

    async def allow_all(job_id: str, digest: str) -> bool:
        return True

    server, port, _ = await create_server(
        "127.0.0.1:0",
        [
            service(
                BlobServicer(store, BlobAccess(db, allow_all)),
                blob_service_pb2_grpc.add_BlobServiceServicer_to_server,
                blob_service_pb2.DESCRIPTOR.services_by_name["BlobService"],
            )
        ],
        interceptors=[auth.interceptor(auth.TokenVerifier(db))],
    )
    await server.start()
    try:
        yield BlobServer(f"127.0.0.1:{port}", token, store)
    finally:
        await server.stop(0)
        db.close()
