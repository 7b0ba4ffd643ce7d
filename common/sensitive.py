"""Files that must never travel in a job package: the one list, used by `sf` and by admission."""

from __future__ import annotations

import fnmatch
import posixpath

# Matched against the file name (last path component), case-insensitively.
SENSITIVE_NAMES = (
    ".env",
    ".env.*",
    "*.env",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    "credentials",
    "credentials.json",
    "*credentials*.json",
    "service-account*.json",
    ".netrc",
    "_netrc",
    ".pgpass",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    ".htpasswd",
    "*.kdbx",
    "kubeconfig",
    ".dockercfg",
)
# Matched against the whole relative path.
SENSITIVE_PATHS = (
    ".aws/credentials",
    ".aws/config",
    ".ssh/*",
    ".docker/config.json",
    ".kube/config",
    ".gnupg/*",
)


def is_sensitive(path: str) -> bool:
    """True when `path` (relative, '/'-separated) names a file that may hold a secret."""
    name = posixpath.basename(path).lower()
    low = path.lower()
    if any(fnmatch.fnmatchcase(name, pat) for pat in SENSITIVE_NAMES):
        return True
    return any(fnmatch.fnmatchcase(low, pat) or fnmatch.fnmatchcase(low, "*/" + pat) for pat in SENSITIVE_PATHS)


def bad_path(path: str) -> str | None:
    """Why a workspace path is unsafe, or None: relative, '/'-separated, no '..', no empty parts."""
    if not path or path.startswith("/") or "\\" in path or "\x00" in path:
        return "must be a relative '/'-separated path"
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "must not contain empty, '.' or '..' components"
    if len(path) > 1024:
        return "is longer than 1024 characters"
    return None
