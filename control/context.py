"""The control plane's shared components, built once and complete by control.app, handed to each part.

`Context` is frozen: nothing assigns a field after it is built (the gRPC port is bound and the HTTP
port started before, so the addresses are known; a stop the API asks for goes through
`StopRequests`, which the reconciler serves).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from control.auth import TokenVerifier
from control.blobstore import BlobStore
from control.capsule_assets import CapsuleAssets
from control.config import ControlConfig
from control.db.engine import Database
from control.events import Notifier
from control.executors import ExecutorPool
from control.secrets import Keyring, MaskCache
from control.telemetry.log_tail import LogTails
from recipes.catalog import Catalog


class StopRequests:
    """Attempts to stop on their backends now, as (attempt id, fleet): the API puts, the reconciler takes."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()

    def put(self, attempt_id: str, fleet: str) -> None:
        self._queue.put_nowait((attempt_id, fleet))

    async def get(self) -> tuple[str, str]:
        return await self._queue.get()


@dataclass(frozen=True)
class Context:
    cfg: ControlConfig
    db: Database
    store: BlobStore
    catalog: Catalog
    assets: CapsuleAssets
    executors: ExecutorPool
    notifier: Notifier
    verifier: TokenVerifier
    replica_id: str
    # The gRPC address jobs and executors reach this control plane at.
    public_address: str
    # The gRPC address runs report their telemetry to: public_address, or the ingest port's.
    public_ingest_address: str = ""
    # Base URL of the HTTP port (blobs for pods); empty when disabled.
    public_http_url: str = ""
    # The secrets key (no key: secrets disabled) and the per-attempt log maskers built from it.
    keyring: Keyring = field(default_factory=lambda: Keyring(None))
    masks: MaskCache = field(default_factory=lambda: MaskCache(Keyring(None)))
    # PEM CA bundle jobs and executors verify this control plane with; empty: it serves plaintext.
    ca_pem: str = ""
    # Stops of running attempts the API asked for, served by the reconciler.
    stop_requests: StopRequests = field(default_factory=StopRequests)
    # The log lines this process stored last, per job, that followers are served from.
    log_tails: LogTails = field(default_factory=LogTails)
