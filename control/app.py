"""Wire the control plane together and run it: `start_control(cfg)` returns a running ControlApp.

Start-up order matters for crash safety: the ledger is migrated, the executors are asked what
they are, and every attempt the ledger thinks is active is reconciled with its executor BEFORE the
scheduler dispatches anything new.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import grpc
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from starforge_api.catalog.v1 import catalog_service_pb2, catalog_service_pb2_grpc
from starforge_api.control.v1 import (
    account_service_pb2,
    account_service_pb2_grpc,
    blob_service_pb2,
    blob_service_pb2_grpc,
    control_service_pb2,
    control_service_pb2_grpc,
    dataset_service_pb2,
    dataset_service_pb2_grpc,
    fleet_service_pb2,
    fleet_service_pb2_grpc,
    secret_service_pb2,
    secret_service_pb2_grpc,
)
from starforge_api.executor.v1 import launch_request_pb2 as lr
from starforge_api.forgelet.v1 import node_registry_service_pb2, node_registry_service_pb2_grpc
from starforge_api.ingest.v1 import ingest_service_pb2, ingest_service_pb2_grpc

from common.config import ConfigError
from common.server import Service, add_services, bind_server, service
from common.tls import channel_credentials, job_ca_pem, server_credentials, server_ssl_context
from control import assembly, auth, capsule_assets, metrics
from control import secrets as secret_store
from control.blob_access import BlobAccess
from control.blobstore import BlobStore
from control.config import ControlConfig
from control.context import Context
from control.db import migrate
from control.db import models as m
from control.db.engine import Database
from control.envoy import Envoy
from control.events import Notifier
from control.executors import ExecutorPool
from control.http_limits import HttpLimits
from control.http_ops import OpsServer
from control.ingest_port import IngestPort
from control.scheduler.dispatch import Scheduler
from control.scheduler.reconcile import Reconciler
from control.services.account_service import AccountServicer
from control.services.blob_service import BlobServicer
from control.services.catalog_service import CatalogServicer
from control.services.control_service import ControlServicer
from control.services.dataset_service import DatasetServicer
from control.services.fleet_service import FleetServicer
from control.services.ingest_service import IngestServicer
from control.services.node_registry_service import NodeRegistryServicer
from control.services.secret_service import SecretServicer
from control.stream_limit import StreamLimiter, StreamLimitInterceptor
from recipes.catalog import Catalog, load_catalog

log = logging.getLogger("starforge.control")


@dataclass
class ControlApp:
    ctx: Context
    server: grpc.aio.Server
    port: int
    scheduler: Scheduler
    reconciler: Reconciler
    stop_event: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    ops: OpsServer | None = None
    envoy: Envoy | None = None
    # IngestService's own port (`ingest_listen`), a thread-pool server
    ingest_port: IngestPort | None = None

    @property
    def ui_url(self) -> str:
        if self.envoy is None:
            return ""
        return f"{'https' if self.envoy.tls.serving else 'http'}://{self.envoy.listen}/"

    @property
    def address(self) -> str:
        return self.ctx.public_address

    async def stop(self, grace: float = 2.0) -> None:
        self.stop_event.set()
        self.ctx.notifier.notify("schedule", "reconcile")
        if self.ingest_port is not None:  # its calls end on this loop: stopped while it still runs
            await self.ingest_port.stop(grace)
        await self.server.stop(grace)
        if self.envoy is not None:
            await asyncio.to_thread(self.envoy.close)
        if self.ops is not None:
            self.ops.stop()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.scheduler.close()
        await self.ctx.executors.close()
        self.ctx.db.close()


ENVOY_CHECK_SECONDS = 1.0
ENVOY_BACKOFF_SECONDS = (1.0, 30.0)  # first delay, cap; doubled while envoy keeps dying young
ENVOY_STABLE_SECONDS = 30.0  # an envoy that lived this long resets the backoff


async def supervise_envoy(envoy: Envoy, stop: asyncio.Event) -> None:
    """Restart the console's front door when it dies (crash, OOM kill), by its own PID handle.

    A crash loop backs off (1 s doubling to 30 s); an envoy that ran for a while is restarted at
    once. Until it is back, the UI and grpc-web are down but gRPC clients are not affected.
    """
    backoff = ENVOY_BACKOFF_SECONDS[0]
    started = time.monotonic()
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), ENVOY_CHECK_SECONDS)
        if stop.is_set() or not envoy.wanted_but_dead():
            continue
        code = envoy.proc.returncode if envoy.proc is not None else None
        if time.monotonic() - started < ENVOY_STABLE_SECONDS:
            log.warning("envoy exited (%s) soon after its start; restarting it in %.0f s", code, backoff)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff)
            backoff = min(backoff * 2, ENVOY_BACKOFF_SECONDS[1])
        else:
            log.warning("envoy exited (%s); restarting it", code)
            backoff = ENVOY_BACKOFF_SECONDS[0]
        if stop.is_set():
            return
        try:
            restarted = await asyncio.to_thread(envoy.restart_if_dead)
        except ConfigError as e:
            log.error("%s", e)
            continue
        if restarted:
            started = time.monotonic()
            log.info("envoy restarted (pid %s) on %s", envoy.proc.pid if envoy.proc else "?", envoy.listen)


def bootstrap_admin(db: Database, name: str, state_dir: pathlib.Path) -> pathlib.Path | None:
    """Create the first admin and write its token to state_dir/admin-token (0600), once."""
    path = state_dir / "admin-token"

    def create(s: Session) -> str | None:
        if s.scalar(select(func.count()).select_from(m.User)):
            return None
        auth.create_user(s, name, admin=True)
        token, _ = auth.issue_token(s, name, "pat", name="bootstrap")
        return token

    token = db.run_sync(create)
    if token is not None:
        path.touch(mode=0o600)
        path.write_text(token + "\n")
        path.chmod(0o600)
        log.info("created admin user %s; token in %s", name, path)
    return path if path.exists() else None


class RunBlobs:
    """Which blobs a run token may read: its attempt's capsule, workspace and dataset files."""

    def __init__(self, db: Database, size: int = 256) -> None:
        self.db = db
        self.size = size
        self._cache: OrderedDict[str, set[str]] = OrderedDict()

    async def allowed(self, attempt_id: str, digest: str) -> bool:
        digests = self._cache.get(attempt_id)
        if digests is None or digest not in digests:

            def load(s: Session) -> set[str]:
                out: set[str] = set()
                for data in s.scalars(select(m.Attempt.launch).where(m.Attempt.id == attempt_id)):
                    if data:
                        req = lr.LaunchRequest()
                        req.ParseFromString(data)
                        out |= assembly.run_digests(req)
                return out

            digests = await self.db.run(load)
            self._cache[attempt_id] = digests
            while len(self._cache) > self.size:
                self._cache.popitem(last=False)
        return digest in digests


def open_secrets(cfg: ControlConfig, db: Database) -> secret_store.Keyring:
    """The secrets keyring; refuses to start (ConfigError) when stored secrets cannot be opened."""
    keyring = secret_store.keyring_from_files(cfg.secrets_key_file, cfg.secrets_old_key_files)
    resealed = db.run_sync(lambda s: secret_store.check_at_start(s, keyring))
    if resealed:
        log.info("re-sealed %d secret(s) with the current secrets key", resealed)
    return keyring


def _loopback_if_wildcard(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "[::]", "") else host


async def _open_ledger(cfg: ControlConfig) -> tuple[Database, secret_store.Keyring]:
    """The migrated database and the secrets keyring; the first admin is created on first start."""
    db = Database(cfg.resolved_database_url)
    await asyncio.to_thread(migrate.upgrade, db.engine)
    try:
        keyring = await asyncio.to_thread(open_secrets, cfg, db)
    except ConfigError:
        db.close()
        raise
    if cfg.bootstrap_admin:
        bootstrap_admin(db, cfg.bootstrap_admin, cfg.resolved_state_dir)
    return db, keyring


def _start_ops(
    cfg: ControlConfig, store: BlobStore, verifier: auth.TokenVerifier, blob_access: BlobAccess
) -> OpsServer | None:
    """The HTTP port (/healthz, /metrics, blobs, the UI), started; None when none is configured."""
    http_listen = cfg.http_listen or ("127.0.0.1:0" if cfg.ui_listen else "")
    if not http_listen:
        return None
    ops = OpsServer(
        http_listen,
        store,
        verifier,
        blob_access,
        asyncio.get_running_loop(),
        ui_dir=cfg.ui_dir,
        ssl_context=server_ssl_context(cfg.tls),
        limits=HttpLimits(
            max_connections=cfg.http_max_connections,
            header_timeout=cfg.http_header_timeout_seconds,
            idle_timeout=cfg.http_idle_timeout_seconds,
            max_header_bytes=cfg.http_max_header_bytes,
            max_pending=cfg.http_max_pending_connections,
        ),
    )
    ops.start()
    return ops


def _http_url(cfg: ControlConfig, ops: OpsServer | None) -> str:
    """The HTTP port's base URL as pods reach it ("" without one)."""
    if ops is None:
        return ""
    if cfg.public_http_url:
        return cfg.public_http_url
    host = _loopback_if_wildcard((cfg.http_listen or "127.0.0.1:0").rsplit(":", 1)[0])
    return f"{'https' if cfg.tls.serving else 'http'}://{host}:{ops.port}"


def _ingest_address(cfg: ControlConfig, ingest: IngestPort | None) -> str:
    """The gRPC address runs report to when the ingest port is served ("" without one)."""
    if ingest is None:
        return ""
    return cfg.public_ingest_address or f"{_loopback_if_wildcard(cfg.ingest_listen.rsplit(':', 1)[0])}:{ingest.port}"


def _grpc_address(cfg: ControlConfig, port: int) -> str:
    """The gRPC address jobs and executors dial."""
    return cfg.public_address or f"{_loopback_if_wildcard(cfg.listen.rsplit(':', 1)[0])}:{port}"


def _services(ctx: Context, blob_access: BlobAccess, ingest: IngestServicer) -> list[Service]:
    """Every gRPC service of the control plane (adapters over ctx)."""
    return [
        service(
            ControlServicer(ctx),
            control_service_pb2_grpc.add_ControlServiceServicer_to_server,
            control_service_pb2.DESCRIPTOR.services_by_name["ControlService"],
        ),
        service(
            ingest,
            ingest_service_pb2_grpc.add_IngestServiceServicer_to_server,
            ingest_service_pb2.DESCRIPTOR.services_by_name["IngestService"],
        ),
        service(
            BlobServicer(ctx.store, blob_access),
            blob_service_pb2_grpc.add_BlobServiceServicer_to_server,
            blob_service_pb2.DESCRIPTOR.services_by_name["BlobService"],
        ),
        service(
            CatalogServicer(ctx.catalog),
            catalog_service_pb2_grpc.add_CatalogServiceServicer_to_server,
            catalog_service_pb2.DESCRIPTOR.services_by_name["CatalogService"],
        ),
        service(
            AccountServicer(ctx.db, ctx.verifier),
            account_service_pb2_grpc.add_AccountServiceServicer_to_server,
            account_service_pb2.DESCRIPTOR.services_by_name["AccountService"],
        ),
        service(
            FleetServicer(ctx),
            fleet_service_pb2_grpc.add_FleetServiceServicer_to_server,
            fleet_service_pb2.DESCRIPTOR.services_by_name["FleetService"],
        ),
        service(
            DatasetServicer(ctx),
            dataset_service_pb2_grpc.add_DatasetServiceServicer_to_server,
            dataset_service_pb2.DESCRIPTOR.services_by_name["DatasetService"],
        ),
        service(
            SecretServicer(ctx),
            secret_service_pb2_grpc.add_SecretServiceServicer_to_server,
            secret_service_pb2.DESCRIPTOR.services_by_name["SecretService"],
        ),
        service(
            NodeRegistryServicer(ctx),
            node_registry_service_pb2_grpc.add_NodeRegistryServiceServicer_to_server,
            node_registry_service_pb2.DESCRIPTOR.services_by_name["NodeRegistryService"],
        ),
    ]


@dataclass(frozen=True)
class _Parts:
    """What the Context is made of that needs no port: loaded (and refused) before any port opens."""

    db: Database
    keyring: secret_store.Keyring
    store: BlobStore
    catalog: Catalog
    assets: capsule_assets.CapsuleAssets
    verifier: auth.TokenVerifier


async def _load_parts(cfg: ControlConfig) -> _Parts:
    db, keyring = await _open_ledger(cfg)
    store = BlobStore(cfg.resolved_blob_dir)
    try:
        assets = await asyncio.to_thread(capsule_assets.load, cfg.capsule_dir.expanduser().resolve(), store)
        catalog = load_catalog()
    except BaseException:
        db.close()
        raise
    return _Parts(db, keyring, store, catalog, assets, auth.TokenVerifier(db))


def _build_context(
    cfg: ControlConfig, parts: _Parts, public_address: str, public_http_url: str, public_ingest_address: str = ""
) -> Context:
    """The shared Context, complete: built once, never assigned to afterwards."""
    return Context(
        cfg=cfg,
        db=parts.db,
        store=parts.store,
        catalog=parts.catalog,
        assets=parts.assets,
        executors=ExecutorPool(cfg.fleets, cfg.executor_deadline_seconds, channel_credentials(cfg.tls)),
        notifier=Notifier(),
        verifier=parts.verifier,
        replica_id=secrets.token_hex(6),
        public_address=public_address,
        public_http_url=public_http_url,
        public_ingest_address=public_ingest_address or public_address,
        keyring=parts.keyring,
        masks=secret_store.MaskCache(parts.keyring),
        ca_pem=job_ca_pem(cfg.tls),
    )


async def _start_envoy(cfg: ControlConfig, port: int, ops: OpsServer | None) -> Envoy | None:
    """The console's front door (grpc-web + UI) when `ui_listen` is set."""
    if not cfg.ui_listen or ops is None:
        return None
    front = Envoy(cfg.resolved_state_dir, cfg.ui_listen, f"127.0.0.1:{port}", f"127.0.0.1:{ops.port}", tls=cfg.tls)
    await asyncio.to_thread(front.start)
    return front


async def _run(app: ControlApp) -> None:
    """Crash recovery first (reconcile every active attempt with its executor), then the loops."""
    await app.ctx.executors.check_all()
    await app.reconciler.tick()
    app.tasks = [
        asyncio.create_task(app.scheduler.run(app.stop_event)),
        asyncio.create_task(app.reconciler.run(app.stop_event)),
        asyncio.create_task(app.reconciler.serve_stop_requests(app.stop_event)),
    ]
    if app.envoy is not None:
        app.tasks.append(asyncio.create_task(supervise_envoy(app.envoy, app.stop_event)))


async def start_control(cfg: ControlConfig) -> ControlApp:
    """Start the control plane: ledger, ports, the shared Context, services, then the loops."""
    cfg.validate_tls()  # also for configs built in code (the embedded console, `sf up --listen`)
    cfg.resolved_state_dir.mkdir(parents=True, exist_ok=True)
    parts = await _load_parts(cfg)
    blob_access = BlobAccess(parts.db, RunBlobs(parts.db).allowed)
    server, port = bind_server(
        cfg.listen,
        # the stream limit after authentication: it counts the caller that one binds
        interceptors=[auth.interceptor(parts.verifier), StreamLimitInterceptor(StreamLimiter(cfg.streams_per_user))],
        credentials=server_credentials(cfg.tls),
    )
    ingest_port = (
        IngestPort(cfg.ingest_listen, max_streams=cfg.ingest_max_streams, credentials=server_credentials(cfg.tls))
        if cfg.ingest_listen
        else None
    )
    ops = _start_ops(cfg, parts.store, parts.verifier, blob_access)
    ctx = _build_context(cfg, parts, _grpc_address(cfg, port), _http_url(cfg, ops), _ingest_address(cfg, ingest_port))
    ingest = IngestServicer(ctx)
    await add_services(server, _services(ctx, blob_access, ingest))
    metrics.install(parts.db)
    await server.start()
    if ingest_port is not None:
        ingest_port.serve(ingest, asyncio.get_running_loop(), auth.resolver(parts.verifier))
    front = await _start_envoy(cfg, port, ops)
    scheduler = Scheduler(ctx)
    app = ControlApp(
        ctx, server, port, scheduler, Reconciler(ctx, scheduler), ops=ops, envoy=front, ingest_port=ingest_port
    )
    await _run(app)
    log.info("control plane serving on %s (replica %s)", ctx.public_address, ctx.replica_id)
    return app
