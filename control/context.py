"""The control plane's shared components, built once by control.app and handed to each part."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from control.auth import TokenVerifier
from control.blobstore import BlobStore
from control.capsule_assets import CapsuleAssets
from control.config import ControlConfig
from control.db.engine import Database
from control.events import Notifier
from control.executors import ExecutorPool
from control.secrets import Keyring, MaskCache
from recipes.catalog import Catalog


@dataclass
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
    public_address: str
    # Base URL of the HTTP port (blobs for pods); empty when disabled.
    public_http_url: str = ""
    # The secrets key (no key: secrets disabled) and the per-attempt log maskers built from it.
    keyring: Keyring = field(default_factory=lambda: Keyring(None))
    masks: MaskCache = field(default_factory=lambda: MaskCache(Keyring(None)))
    # PEM CA bundle jobs and executors verify this control plane with; empty: it serves plaintext.
    ca_pem: str = ""
    # Stop an attempt on its backend now (attempt id, fleet); set by control.app once the
    # reconciler exists.
    stop_attempt: Callable[[str, str], None] | None = None
