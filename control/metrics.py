"""Prometheus metrics of the control plane (served at /metrics on the HTTP port).

Counters and histograms are updated where things happen; ledger-derived gauges (jobs per state,
queue depth per fleet) are computed when scraped, by a collector that reads the ledger (cached a
few seconds, so a scrape storm costs one query).
"""

from __future__ import annotations

import gc
import json
import threading
import time
from collections import Counter as Tally
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.gc_collector import GCCollector
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session
from starforge_api.job.v1 import job_state_pb2 as st

from control.db import models as m
from control.db.engine import Database

REGISTRY = CollectorRegistry(auto_describe=True)

SUBMISSIONS = Counter(
    "starforge_submissions_total",
    "Submissions by outcome: admitted, or refused with the ErrorReason",
    ["outcome", "reason"],
    registry=REGISTRY,
)
DISPATCH_SECONDS = Histogram(
    "starforge_dispatch_latency_seconds",
    "From an attempt being claimed to its executor accepting the launch",
    ["fleet"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
QUEUE_WAIT_SECONDS = Histogram(
    "starforge_queue_wait_seconds",
    "From admission (or requeue) to dispatch",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 5, 30, 60, 300, 1800, 3600, 14400),
    registry=REGISTRY,
)
INGEST_RECORDS = Counter(
    "starforge_ingest_records_total", "Records stored from capsules, by kind", ["kind"], registry=REGISTRY
)
INGEST_LOG_DROPPED_BYTES = Counter(
    "starforge_ingest_log_dropped_bytes_total",
    "Log bytes not stored because a job's log reached its quota (log_quota_bytes_per_job)",
    registry=REGISTRY,
)
INGEST_PORT_STREAMS = Gauge(
    "starforge_ingest_port_streams",
    "Report streams open on the ingest port (ingest_listen); one more than ingest_max_streams is refused",
    registry=REGISTRY,
)
HTTP_CONNECTIONS_REFUSED = Counter(
    "starforge_http_connections_refused_total",
    "Connections to the HTTP port answered 503 at once: http_max_connections were open",
    registry=REGISTRY,
)
HTTP_CONNECTIONS_TIMED_OUT = Counter(
    "starforge_http_connections_timed_out_total",
    "Connections to the HTTP port closed because the request head did not arrive in time",
    registry=REGISTRY,
)
BLOB_BYTES = Counter(
    "starforge_blob_bytes_uploaded_total", "Bytes of new blob content clients uploaded", registry=REGISTRY
)
BLOBS = Counter(
    "starforge_blobs_uploaded_total", "Blobs clients uploaded, by whether they were new", ["new"], registry=REGISTRY
)
LAUNCH_FAILURES = Counter(
    "starforge_launch_failures_total",
    "Launch calls that failed, by kind of failure",
    ["fleet", "kind"],
    registry=REGISTRY,
)


class GcPauses:
    """The time each generation's collections held the process, from `gc.callbacks`.

    Plain numbers, no lock: a callback runs with the GIL held, collections never nest, and a
    lock here could be the one the collecting thread already holds (a collection starts at any
    allocation), which would deadlock it."""

    def __init__(self) -> None:
        self.total = [0.0, 0.0, 0.0]
        self.longest = [0.0, 0.0, 0.0]
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        took = time.perf_counter() - self._began
        g = info["generation"]
        self.total[g] += took
        self.longest[g] = max(self.longest[g], took)


class GcCollector(Collector):
    """The garbage collector's settings in effect (`common.gc_tuning`) and its pauses, beside
    prometheus_client's `python_gc_*` counts of collections: what an operator reads to see why
    the event loop stood still."""

    def __init__(self, pauses: GcPauses) -> None:
        self.pauses = pauses

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        thresholds = GaugeMetricFamily(
            "starforge_gc_threshold", "The garbage collector's threshold per generation", labels=["generation"]
        )
        for generation, value in enumerate(gc.get_threshold()):
            thresholds.add_metric([str(generation)], value)
        yield thresholds
        yield GaugeMetricFamily(
            "starforge_gc_frozen_objects",
            "Objects gc.freeze() moved out of every collection's walk when the process started serving",
            value=gc.get_freeze_count(),
        )
        total = CounterMetricFamily(
            "starforge_gc_pause_seconds", "Time the process spent in collections, per generation", labels=["generation"]
        )
        longest = GaugeMetricFamily(
            "starforge_gc_pause_max_seconds", "The longest single collection, per generation", labels=["generation"]
        )
        for generation in range(3):
            total.add_metric([str(generation)], self.pauses.total[generation])
            longest.add_metric([str(generation)], self.pauses.longest[generation])
        yield total
        yield longest


GC_PAUSES = GcPauses()
gc.callbacks.append(GC_PAUSES)
GCCollector(registry=REGISTRY)
REGISTRY.register(GcCollector(GC_PAUSES))


# The queue depth per fleet reads every QUEUED job's eligible fleets (2.5 s of the database thread
# at 1,000,000 queued); a read is kept READ_COST_FACTOR times as long as it took, at least
# `cache_seconds`, so scrapes take at most about 1 / (1 + READ_COST_FACTOR) of that thread.
READ_COST_FACTOR = 20.0


class LedgerCollector(Collector):
    def __init__(self, db: Database, cache_seconds: float = 1.0) -> None:
        self.db = db
        self.cache_seconds = cache_seconds
        self._at = 0.0
        self._cost = 0.0  # how long the last read took (seconds)
        self._lock = threading.Lock()
        self._states: dict[int, int] = {}
        self._depth: dict[str, int] = {}

    def _refresh(self) -> None:
        def read(s: Session) -> tuple[dict[int, int], dict[str, int]]:
            states = dict(s.execute(select(m.Job.state, func.count()).group_by(m.Job.state)).all())
            depth: Tally[str] = Tally()
            for (eligible,) in s.execute(select(m.Job.eligible_fleets).where(m.Job.state == st.JOB_STATE_QUEUED)):
                for fleet in json.loads(eligible or "[]") or ["(any)"]:
                    depth[fleet] += 1
            return states, dict(depth)

        started = time.monotonic()
        self._states, self._depth = self.db.run_sync(read)
        self._at = time.monotonic()
        self._cost = self._at - started

    def describe(self) -> Iterator[GaugeMetricFamily]:
        """The families without values: registering the collector must not read (and cache) the
        ledger, or the first scrape could serve counts from start-up for `cache_seconds`."""
        yield GaugeMetricFamily("starforge_jobs", "Jobs per ledger state", labels=["state"])
        yield GaugeMetricFamily("starforge_queue_depth", "QUEUED jobs per fleet that can run them", labels=["fleet"])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            if time.monotonic() - self._at > max(self.cache_seconds, READ_COST_FACTOR * self._cost):
                self._refresh()
            states, depth = dict(self._states), dict(self._depth)
        jobs = GaugeMetricFamily("starforge_jobs", "Jobs per ledger state", labels=["state"])
        for value in st.JobState.values():
            if value:
                jobs.add_metric([st.JobState.Name(value).removeprefix("JOB_STATE_")], states.get(value, 0))
        yield jobs
        queue = GaugeMetricFamily("starforge_queue_depth", "QUEUED jobs per fleet that can run them", labels=["fleet"])
        for fleet, n in sorted(depth.items()):
            queue.add_metric([fleet], n)
        yield queue


_installed: list[LedgerCollector] = []


def install(db: Database) -> None:
    """Register the ledger collector for this process's control plane (replacing an earlier one:
    tests start several control planes in one process)."""
    while _installed:
        REGISTRY.unregister(_installed.pop())
    collector = LedgerCollector(db)
    REGISTRY.register(collector)
    _installed.append(collector)
