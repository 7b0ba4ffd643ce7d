"""Kubernetes-safe names and labels for an attempt's objects (pure functions).

The RayJob name is derived from the attempt id alone, so that Launch is idempotent through the
API server itself (a second create answers 409) and a restarted executor finds an attempt's
object without any state of its own.

KubeRay, not Kubernetes, sets the tightest limit: a RayJob name must be a DNS-1035 label of at
most 47 characters (`MaxRayJobNameLength` = 53 - 6, because the RayCluster it creates appends a
suffix and its services another). StarForge attempt ids ("j" + 13 base32 chars + "." + n) fit
easily; anything unusual is shortened and made unique with a hash.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

MAX_RAYJOB_NAME = 47
MAX_LABEL_VALUE = 63
PREFIX = "sf-"

_PLAIN_ATTEMPT = re.compile(r"^[a-z0-9]+(\.[0-9]+)?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _hash8(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:8]


def rayjob_name(attempt_id: str) -> str:
    """`sf-<attempt id with '.' -> '-'>`; lossy or long ids get a hash suffix (still unique)."""
    if _PLAIN_ATTEMPT.match(attempt_id) and len(PREFIX) + len(attempt_id) <= MAX_RAYJOB_NAME:
        return PREFIX + attempt_id.replace(".", "-")
    cleaned = re.sub(r"[^a-z0-9]+", "-", attempt_id.lower()).strip("-")
    room = MAX_RAYJOB_NAME - len(PREFIX) - 9
    head = cleaned[:room].rstrip("-")
    return f"{PREFIX}{head}-{_hash8(attempt_id)}" if head else f"{PREFIX}{_hash8(attempt_id)}"


def secret_name(attempt_id: str) -> str:
    """The per-attempt Secret holding tokens (use_secret_for_token)."""
    return rayjob_name(attempt_id) + "-env"


def dns_label(value: str, max_len: int = MAX_LABEL_VALUE) -> str:
    """A DNS-1123 label for `value` (a pool name as a worker group name)."""
    if _DNS_LABEL.match(value) and len(value) <= max_len:
        return value
    cleaned = re.sub(r"[^a-z0-9]+", "-", value.lower()).strip("-")[: max_len - 9].rstrip("-")
    return f"{cleaned}-{_hash8(value)}" if cleaned else f"g-{_hash8(value)}"


def label_value(value: str) -> str:
    """A valid label value: unchanged when it already is one, else cleaned and hash-suffixed."""
    if len(value) <= MAX_LABEL_VALUE and _LABEL_VALUE.match(value):
        return value
    cleaned = re.sub(r"[^-A-Za-z0-9_.]+", "_", value)
    cleaned = re.sub(r"^[^A-Za-z0-9]+", "", cleaned)[: MAX_LABEL_VALUE - 9]
    cleaned = re.sub(r"[^A-Za-z0-9]+$", "", cleaned)
    return f"{cleaned}-{_hash8(value)}" if cleaned else _hash8(value)


def label_key(key: str) -> str:
    """A valid label key (`[prefix/]name`), cleaned the same way when it is not one."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        prefix = re.sub(r"[^a-z0-9.-]+", "-", prefix.lower()).strip("-.")[:253].strip("-.") or "x"
    if not (len(name) <= MAX_LABEL_VALUE and _LABEL_NAME.match(name)):
        name = label_value(name) or _hash8(key)
    return f"{prefix}/{name}" if prefix else name


def safe_labels(labels: Mapping[str, str]) -> dict[str, str]:
    """Every key and value made label-safe; the exact originals go to an annotation."""
    return {label_key(k): label_value(v) for k, v in labels.items()}
