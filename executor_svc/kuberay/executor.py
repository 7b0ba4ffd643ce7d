"""KubeRayExecutor: one KubeRay RayJob per attempt, driven through the Kubernetes API.

- launch: build the RayJob (builder.py) and create it. The name comes from the attempt id, so the
  API server is the idempotency lock: 409 AlreadyExists -> the existing object, already_launched.
- observe: a background list + watch (watch.py) keeps every RayJob of this executor in memory;
  attempts not in it (or while the watch is down) are read with a GET. status -> ledger: states.py.
- stop: delete the RayJob with propagationPolicy Foreground. On a cluster the object stays, with a
  deletionTimestamp, until the garbage collector has removed its RayCluster and pods, and observe
  reports STOPPED meanwhile; when it is gone, the GPUs are free. The pods' own
  terminationGracePeriodSeconds (stop grace + drain, fixed at launch) and Ray's
  RAY_JOB_STOP_WAIT_TIME_S carry the SIGTERM -> SIGKILL grace: a CR deletion has no grace of its own.
- cleanup: delete a RayJob that no longer runs (and its Secret). Refused while it runs.
- Attempts this instance stopped or cleaned up keep their last observation in memory, so observe
  keeps answering STOPPED (or the final state) for them instead of "not found" until a restart,
  and the same while their RayJob is still being deleted (however far the watch has got).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime as dt
import logging
from collections.abc import Sequence
from typing import Any

from starforge_api.executor.v1 import executor_service_pb2 as ex_pb
from starforge_api.executor.v1 import launch_request_pb2 as lr_pb
from starforge_api.job.v1 import job_state_pb2 as st

from common import __version__, errors
from executor_svc.base import (
    LABEL_EXECUTOR,
    LABEL_MANAGED,
    MANAGED_BY,
    RUNTIME_RAY,
    Capabilities,
    Executor,
    LaunchResult,
    Observation,
    SeriesInventory,
)
from executor_svc.kuberay import builder, names, states
from executor_svc.kuberay.config import KubeRayConfig
from executor_svc.kuberay.images import container_digest, head_pod_name
from executor_svc.kuberay.kube import KubeApi, NoPodsApi
from executor_svc.kuberay.watch import RayJobWatch

log = logging.getLogger("starforge.executor.kuberay")

VERSION = __version__
MAX_REMEMBERED = 10_000


def _deleting(obj: dict[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


class KubeRayExecutor(Executor):
    """The `kuberay` kind. Build it with `await KubeRayExecutor.create(cfg)`."""

    kind = "kuberay"

    def __init__(self, cfg: KubeRayConfig, kube: KubeApi) -> None:
        self.cfg = cfg
        self.kube = kube
        self.selector = f"{LABEL_MANAGED}={MANAGED_BY},{LABEL_EXECUTOR}={cfg.executor_name}"
        self.watch = RayJobWatch(kube, self.selector, cfg.watch_timeout_seconds)
        self._ended: collections.OrderedDict[str, Observation] = collections.OrderedDict()
        # attempt id -> image digest read from its head pod (or why it cannot be read).
        self._digests: collections.OrderedDict[str, str] = collections.OrderedDict()

    @classmethod
    async def create(cls, cfg: KubeRayConfig) -> KubeRayExecutor:
        """Load the client configuration (Unavailable when it is unusable) and start the watch.

        An unreachable API server does not stop the executor from starting: calls answer
        Unavailable until it is back, and the watch reconnects by itself.
        """
        kube = await asyncio.to_thread(KubeApi.from_config, cfg)
        ex = cls(cfg, kube)
        ex.watch.start()
        if not cfg.out_volume_claim:
            log.warning(
                "kuberay.out_volume_claim is empty: FORGE_OUT_DIR is an emptyDir that is lost with the pods, "
                "so checkpoints do not survive attempts and PAUSE is not offered"
            )
        log.info("kuberay executor: API %s, namespace %s, selector %s", kube.host, cfg.namespace, ex.selector)
        return ex

    def _handle(self, name: str) -> str:
        return f"{self.cfg.namespace}/{name}"

    def _remember(self, obs: Observation) -> None:
        self._ended[obs.attempt_id] = obs
        self._ended.move_to_end(obs.attempt_id)
        while len(self._ended) > MAX_REMEMBERED:
            self._ended.popitem(last=False)

    async def _get(self, attempt_id: str) -> dict[str, Any] | None:
        """The attempt's RayJob: from the watch's view when it has it, else a GET."""
        name = names.rayjob_name(attempt_id)
        obj = self.watch.get(name) if self.watch.synced else None
        if obj is None:
            obj = await asyncio.to_thread(self.kube.get_rayjob, name)
            if obj is not None:
                self.watch.offer(obj)
        if obj is not None and builder.attempt_of(obj) != attempt_id:
            log.warning("RayJob %s belongs to attempt %r, not %r", name, builder.attempt_of(obj), attempt_id)
            return None
        return obj

    def _observation(self, obj: dict[str, Any]) -> Observation:
        status = obj.get("status") or {}
        m = states.map_status(status, deleting=_deleting(obj))
        return Observation(
            attempt_id=builder.attempt_of(obj),
            state=m.state,
            exit_code=m.exit_code,
            message=m.message,
            log_tail=m.log_tail,
            backend_handle=self._handle(obj["metadata"]["name"]),
            node=str(status.get("rayClusterName") or ""),
            start_time=m.start_time,
            end_time=m.end_time,
            failure_class=m.failure_class,
            image_digest=self._digests.get(builder.attempt_of(obj), ""),
        )

    async def _learn_digest(self, attempt_id: str, obj: dict[str, Any]) -> None:
        """Read the image digest from the attempt's head pod once it has one (kept afterwards).

        A pod not there yet (or gone), or an API error, is tried again at the next observe; a
        server without Pods gets an `unresolved:` digest that says so."""
        if attempt_id in self._digests:
            return
        pod_name = head_pod_name(obj.get("status"))
        if not pod_name:
            return
        try:
            pod = await asyncio.to_thread(self.kube.read_pod, pod_name)
        except NoPodsApi as exc:
            self._keep_digest(attempt_id, f"unresolved:{exc.message}")
            return
        except errors.StarforgeError as exc:
            log.debug("image digest of %s: %s", attempt_id, exc.message)
            return
        digest = container_digest(pod) if pod is not None else ""
        if digest:
            self._keep_digest(attempt_id, digest)

    def _keep_digest(self, attempt_id: str, digest: str) -> None:
        self._digests[attempt_id] = digest
        while len(self._digests) > MAX_REMEMBERED:
            self._digests.popitem(last=False)

    # -- describe ---------------------------------------------------------------------------

    async def describe(self) -> Capabilities:
        # Always one call, so an unreachable API answers Unavailable; the watch's view (when
        # synced) saves listing every object.
        synced = self.watch.synced
        items, _ = await asyncio.to_thread(self.kube.list_rayjobs, self.selector, 1 if synced else None)
        if synced:
            items = self.watch.items()
        used: collections.Counter[str] = collections.Counter()
        for obj in items:
            if states.is_active(obj.get("status"), deleting=_deleting(obj)):
                for p in builder.pools_of(obj):
                    used[str(p.get("series"))] += int(p.get("nodes", 0)) * int(p.get("gpus_per_node", 0))
        caps = {
            ex_pb.EXECUTOR_CAPABILITY_MULTI_POOL,
            ex_pb.EXECUTOR_CAPABILITY_MULTI_NODE,
            ex_pb.EXECUTOR_CAPABILITY_IMAGES,
        }
        if any(s.gpus_per_node for s in self.cfg.inventory):
            caps.add(ex_pb.EXECUTOR_CAPABILITY_GPUS)
        if self.cfg.out_volume_claim:  # checkpoints outlive the pods, so a later attempt resumes
            caps.add(ex_pb.EXECUTOR_CAPABILITY_PAUSE)
        return Capabilities(
            kind=self.kind,
            runtime=RUNTIME_RAY,
            capabilities=frozenset(caps),
            inventory=tuple(
                SeriesInventory(s.series, s.nodes, s.gpus_per_node, max(0, s.nodes * s.gpus_per_node - used[s.series]))
                for s in self.cfg.inventory
            ),
            version=VERSION,
        )

    # -- launch -----------------------------------------------------------------------------

    async def launch(self, request: lr_pb.LaunchRequest) -> LaunchResult:
        built = builder.build(request, self.cfg)
        handle = self._handle(built.name)
        if request.attempt_id in self._ended or (self.watch.synced and self.watch.get(built.name)):
            return await self._existing(request.attempt_id, built)
        labels = built.manifest["metadata"]["labels"]
        if built.secret_data is not None:
            await asyncio.to_thread(self.kube.put_secret, built.secret_name, built.secret_data, labels)
        try:
            created = await asyncio.to_thread(self.kube.create_rayjob, built.manifest)
        except BaseException:
            if built.secret_data is not None:
                await self._drop_secret(built.secret_name)
            raise
        if created is None:  # 409: launched before (by us, or by an executor before a restart)
            return await self._existing(request.attempt_id, built)
        self.watch.offer(created)
        if built.secret_data is not None:
            try:
                await asyncio.to_thread(self.kube.own_secret, built.secret_name, created)
            except errors.StarforgeError as exc:
                log.warning("secret %s has no owner; Cleanup deletes it: %s", built.secret_name, exc.message)
        log.info("launched %s as RayJob %s", request.attempt_id, handle)
        # The digest the image really has is the head pod's imageID, reported by observe.
        return LaunchResult(backend_handle=handle, already_launched=False, out_dir=built.out_dir)

    async def _existing(self, attempt_id: str, built: builder.Built) -> LaunchResult:
        handle = self._handle(built.name)
        if attempt_id in self._ended:
            return LaunchResult(backend_handle=handle, already_launched=True, out_dir=built.out_dir)
        obj = await asyncio.to_thread(self.kube.get_rayjob, built.name)
        if obj is None:
            raise errors.Unavailable(f"RayJob {handle} existed a moment ago and is gone now; retry the launch")
        if builder.attempt_of(obj) != attempt_id:
            raise errors.FailedPrecondition(
                f"RayJob {handle} exists but belongs to attempt {builder.attempt_of(obj)!r}, not {attempt_id!r}",
                precondition_violations=(errors.PreconditionViolation("NAME_TAKEN", handle, "another attempt"),),
            )
        out_dir = str((obj["metadata"].get("annotations") or {}).get(builder.ANN_OUT, built.out_dir))
        return LaunchResult(backend_handle=handle, already_launched=True, out_dir=out_dir)

    async def _drop_secret(self, name: str) -> int:
        try:
            return int(await asyncio.to_thread(self.kube.delete_secret, name))
        except errors.StarforgeError as exc:
            log.warning("could not delete secret %s: %s", name, exc.message)
            return 0

    # -- observe ----------------------------------------------------------------------------

    async def observe(self, attempt_ids: Sequence[str]) -> list[Observation]:
        return list(await asyncio.gather(*(self._observe(a) for a in attempt_ids)))

    async def _observe(self, attempt_id: str) -> Observation:
        obj = await self._get(attempt_id)
        ended = self._ended.get(attempt_id)
        # A RayJob this instance deleted is on its way out: what it remembered is the answer, the
        # same whether the watch has seen the deletion end yet or still holds the deleting object.
        if obj is None or (ended is not None and _deleting(obj)):
            return ended or Observation.missing(attempt_id)
        await self._learn_digest(attempt_id, obj)
        return self._observation(obj)

    # -- stop / cleanup / list --------------------------------------------------------------

    async def stop(self, attempt_id: str, grace_seconds: float) -> bool:
        obj = await self._get(attempt_id)
        if obj is None or not states.is_active(obj.get("status"), deleting=_deleting(obj)):
            return False
        before = self._observation(obj)
        deleted = await asyncio.to_thread(self.kube.delete_rayjob, obj["metadata"]["name"])
        if deleted is None:
            return False
        if deleted.get("metadata"):
            self.watch.offer(deleted)
        self._remember(
            dataclasses.replace(
                before,
                state=st.JOB_STATE_STOPPED,
                exit_code=None,
                failure_class=st.FAILURE_CLASS_UNSPECIFIED,
                message=f"stopped: RayJob {before.backend_handle} deleted by StarForge ({before.message})",
                end_time=dt.datetime.now(dt.UTC),
            )
        )
        log.info(
            "stopped %s (RayJob %s deleted, grace %.0fs set at launch)",
            attempt_id,
            before.backend_handle,
            grace_seconds,
        )
        return True

    async def cleanup(self, attempt_id: str) -> int:
        obj = await self._get(attempt_id)
        removed = 0
        if obj is not None:
            if states.is_active(obj.get("status"), deleting=_deleting(obj)):
                raise errors.FailedPrecondition(
                    f"attempt {attempt_id} still runs (RayJob {self._handle(obj['metadata']['name'])}); stop it first",
                    precondition_violations=(errors.PreconditionViolation("STATE", attempt_id, "attempt is running"),),
                )
            if not _deleting(obj):
                final = self._observation(obj)
                deleted = await asyncio.to_thread(self.kube.delete_rayjob, obj["metadata"]["name"])
                if deleted is not None:
                    removed += 1
                    if deleted.get("metadata"):  # the watch's view may lag: a second Cleanup sees it deleting
                        self.watch.offer(deleted)
                    if attempt_id not in self._ended:
                        self._remember(dataclasses.replace(final, message=final.message + " (cleaned up)"))
        if self.cfg.use_secret_for_token:
            removed += await self._drop_secret(names.secret_name(attempt_id))
        if removed:
            log.info("cleaned up %s (%d objects)", attempt_id, removed)
        return removed

    async def list_attempts(self) -> list[Observation]:
        if self.watch.synced:
            items = self.watch.items()
        else:
            items, _ = await asyncio.to_thread(self.kube.list_rayjobs, self.selector)
        found = [self._observation(o) for o in items if builder.attempt_of(o)]
        return sorted(found, key=lambda o: o.attempt_id)

    async def close(self) -> None:
        await asyncio.to_thread(self.watch.stop)
        await asyncio.to_thread(self.kube.close)
