"""Fetch an attempt's capsule, workspace and datasets into a pod, before anything else runs.

Every pod of a kuberay attempt (head and workers) has an init container, same image as the
training container, that runs this file's source as `python3 -I -c <source>`: the standard
library only, so any image with Python 3.8+ can run it, and nothing but the source travels in
the RayJob. Inputs come from the environment the executor sets:

    FORGE_BLOB_URL        control plane HTTP base URL; a blob is GET <url>/v1/blobs/<sha256>
    FORGE_BLOB_TOKEN      the attempt's run token, sent as "Authorization: Bearer <token>"
    FORGE_BLOB_CA_PEM     PEM CA bundle verifying an https FORGE_BLOB_URL (empty: the system's CAs)
    FORGE_CAPSULE_SHA256  sha256 of capsule.json (the trust root, from the LaunchRequest)
    FORGE_CAPSULE_DIR     where root "capsule" files go
    FORGE_WORKSPACE_DIR   where root "workspace" files go
    FORGE_DATASETS_DIR    where root "datasets" files go ("<name>/<path>")
    FORGE_FETCH_FILES     JSON list of further files [[root, path, sha256, size, executable], ...]:
                          the LaunchRequest's capsule files and dataset files
    FORGE_INGEST_TOKEN, FORGE_INGEST_TOKEN_FILE  (head pod only) the run token, written to that
                          file (mode 0600) for the runner, which deletes it: the token is never
                          in the training container's environment

capsule.json is fetched first and checked against FORGE_CAPSULE_SHA256; then every file it lists
and every file of FORGE_FETCH_FILES is downloaded, hashed while written to a temporary file, and
renamed into place only when its sha256 and size match (mode 0755 for executables, else 0644).
bootstrap.sh verifies everything again before the runner starts: this script makes the layout
exist, bootstrap.sh is the check that decides.

Exit codes: 0 done; 97 a blob did not match its digest, or a manifest entry is unsafe (same as
bootstrap.sh's integrity failures); 1 the blob service refused or could not be reached (after
retries; a certificate that does not verify is not retried). Each failure prints one line
"starforge: capsule fetch failed: ..." on stderr.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import shutil
import ssl
import sys
import tempfile
import time
import urllib.error
import urllib.request

CHUNK = 1 << 20
ATTEMPTS = 5  # per blob, for network errors and 5xx/429 answers
TIMEOUT_SECONDS = 60
WORKERS = 8
INTEGRITY = 97
MAX_NAME_BYTES = 255  # longest file name component a file system takes
REQUIRED = ("FORGE_BLOB_URL", "FORGE_BLOB_TOKEN", "FORGE_CAPSULE_SHA256", "FORGE_CAPSULE_DIR", "FORGE_WORKSPACE_DIR")
ROOTS = {"capsule": "FORGE_CAPSULE_DIR", "workspace": "FORGE_WORKSPACE_DIR", "datasets": "FORGE_DATASETS_DIR"}


# "context": verifies an https FORGE_BLOB_URL with the control plane's CA (`use_ca`); absent:
# the system's CAs.
TLS: dict[str, ssl.SSLContext] = {}


def use_ca(ca_pem: str) -> None:
    """Trust exactly the CA the control plane sent (FORGE_BLOB_CA_PEM) for https downloads."""
    if ca_pem:
        try:
            TLS["context"] = ssl.create_default_context(cadata=ca_pem)
        except (ssl.SSLError, ValueError) as exc:
            raise FetchError(f"FORGE_BLOB_CA_PEM is not a PEM CA bundle ({exc})") from None


class FetchError(Exception):
    """A failure with the exit code it warrants."""

    def __init__(self, text: str, code: int = 1) -> None:
        super().__init__(text)
        self.code = code


def destination(roots: dict[str, str], root: str, path: str) -> str:
    """Where a manifest entry goes; FetchError for a root or path that could leave its directory."""
    bad = not isinstance(path, str) or not path or path.startswith("/") or "\\" in path or "\0" in path
    parts = str(path).split("/")
    # executor_svc/plumbing/paths.py's rule, spelled out again: this file runs alone in the pod.
    if bad or any(part in ("", ".", "..") or len(part.encode()) > MAX_NAME_BYTES for part in parts):
        raise FetchError(f"{root}/{path}: unsafe path in the manifest", INTEGRITY)
    if not roots.get(root):
        raise FetchError(f"{root}/{path}: unknown root {root!r}", INTEGRITY)
    return os.path.join(roots[root], *path.split("/"))


def download(base: str, token: str, digest: str, size: int, dest: str, executable: bool, label: str) -> int:
    """Download one blob to `dest`, verified; retries transient failures. Returns its size."""
    url = f"{base}/v1/blobs/{digest}"
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return _download_once(url, token, digest, size, dest, executable, label)
        except urllib.error.HTTPError as exc:
            body = exc.read(500).decode("utf-8", "replace").strip()
            if exc.code not in (429, 500, 502, 503, 504) or attempt == ATTEMPTS:
                raise FetchError(f"{label}: GET {url} answered {exc.code} {exc.reason}: {body}") from None
            last = f"{exc.code} {exc.reason}"
        except (urllib.error.URLError, OSError) as exc:
            cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            if isinstance(cause, ssl.SSLCertVerificationError):
                # another CA, an expired certificate, another name: trying again does not change it
                raise FetchError(f"{label}: GET {url} failed: {cause}") from None
            if attempt == ATTEMPTS:
                raise FetchError(f"{label}: GET {url} failed after {ATTEMPTS} tries: {exc}") from None
            last = str(exc)
        sys.stderr.write(f"starforge: fetch: {label}: {last}; retrying\n")
        time.sleep(min(2 ** (attempt - 1), 8))
    raise AssertionError("unreachable")


def _download_once(url: str, token: str, digest: str, size: int, dest: str, executable: bool, label: str) -> int:
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    # http(s) only: FORGE_BLOB_URL comes from the control plane's configuration.
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})  # noqa: S310
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=".fetch-")
    try:
        h = hashlib.sha256()
        received = 0
        opened = urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS, context=TLS.get("context"))  # noqa: S310
        with os.fdopen(fd, "wb") as out, opened as resp:
            while True:
                chunk = resp.read(CHUNK)
                if not chunk:
                    break
                h.update(chunk)
                out.write(chunk)
                received += len(chunk)
        found = h.hexdigest()
        if found != digest or (size >= 0 and received != size):
            want = f"sha256 {digest}" + (f", {size} bytes" if size >= 0 else "")
            raise FetchError(f"{label}: expected {want}; got sha256 {found}, {received} bytes from {url}", INTEGRITY)
        os.chmod(tmp, 0o755 if executable else 0o644)
        os.replace(tmp, dest)
        return received
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def plan(
    doc: object, extra: list[list[object]], roots: dict[str, str], done: dict[str, str]
) -> dict[str, list[tuple[str, int, bool, str]]]:
    """digest -> [(destination, size, executable, label)]: every file once, minus those in `done`
    (destination -> digest, already in place)."""
    if (
        not isinstance(doc, dict)
        or doc.get("schema") != "starforge.capsule/v2"
        or not isinstance(doc.get("files"), list)
    ):
        raise FetchError("capsule/capsule.json: not a starforge.capsule/v2 document with a files list", INTEGRITY)
    entries = [
        [e.get("root"), e.get("path"), e.get("sha256"), e.get("size", -1), e.get("executable", False)]
        for e in doc["files"]
        if isinstance(e, dict)
    ]
    if len(entries) != len(doc["files"]) or not isinstance(extra, list):
        raise FetchError("capsule/capsule.json or FORGE_FETCH_FILES: a file entry is not an object", INTEGRITY)
    by_digest: dict[str, list[tuple[str, int, bool, str]]] = {}
    seen = dict(done)
    for root, path, raw_digest, size, executable in entries + list(extra):
        label = f"{root}/{path}"
        dest = destination(roots, str(root), path)
        digest = str(raw_digest).lower()
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise FetchError(f"{label}: {digest!r} is not a sha256 digest", INTEGRITY)
        if dest in seen:
            if seen[dest] != digest:
                raise FetchError(f"{label}: listed twice with different digests", INTEGRITY)
            continue
        seen[dest] = digest
        known = _size(size)
        by_digest.setdefault(digest, []).append((dest, known, bool(executable), label))
    return by_digest


def _size(raw: object) -> int:
    """A listed size, -1 when unknown. capsule.json is protobuf's JSON mapping, which writes
    int64 as a decimal string; FORGE_FETCH_FILES entries carry plain integers."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.isdigit():
        return int(raw)
    return -1


def fetch_group(base: str, token: str, digest: str, targets: list[tuple[str, int, bool, str]]) -> int:
    """Download a blob once and copy it to every other path that has the same content."""
    first, size, executable, label = targets[0]
    total = download(base, token, digest, size, first, executable, label)
    for dest, _, executable, _ in targets[1:]:
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(first, dest)
        os.chmod(dest, 0o755 if executable else 0o644)
        total += size if size >= 0 else 0
    return total


def write_token(path: str, token: str) -> None:
    """The run token for the runner: readable by this user only, never written through a link."""
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)  # the scratch emptyDir's mount
    if os.path.lexists(path):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, token.encode())
    finally:
        os.close(fd)


def main() -> int:
    started = time.monotonic()
    env = os.environ
    unset = [k for k in REQUIRED if not env.get(k)]
    if unset:
        sys.stderr.write(f"starforge: capsule fetch failed: {', '.join(unset)} not set (the executor sets them)\n")
        return 1
    base = env["FORGE_BLOB_URL"].rstrip("/")
    token = env["FORGE_BLOB_TOKEN"]
    roots = {root: env.get(var, "") for root, var in ROOTS.items()}
    capsule_digest = env["FORGE_CAPSULE_SHA256"].strip().lower()
    try:
        use_ca(env.get("FORGE_BLOB_CA_PEM", ""))
        try:
            extra = json.loads(env.get("FORGE_FETCH_FILES") or "[]")
        except ValueError as exc:
            raise FetchError(f"FORGE_FETCH_FILES is not valid JSON ({exc})", INTEGRITY) from None
        capsule_json = destination(roots, "capsule", "capsule.json")
        total = download(base, token, capsule_digest, -1, capsule_json, False, "capsule/capsule.json")
        with open(capsule_json, "rb") as f:
            try:
                doc = json.loads(f.read().decode("utf-8"))
            except ValueError as exc:
                raise FetchError(f"capsule/capsule.json: not valid JSON ({exc})", INTEGRITY) from None
        groups = plan(doc, extra, roots, {capsule_json: capsule_digest})
        with concurrent.futures.ThreadPoolExecutor(WORKERS) as pool:
            jobs = [pool.submit(fetch_group, base, token, d, t) for d, t in sorted(groups.items())]
            for job in concurrent.futures.as_completed(jobs):
                total += job.result()
    except FetchError as exc:
        sys.stderr.write(f"starforge: capsule fetch failed: {exc}\n")
        return exc.code
    if env.get("FORGE_INGEST_TOKEN") and env.get("FORGE_INGEST_TOKEN_FILE"):
        write_token(env["FORGE_INGEST_TOKEN_FILE"], env["FORGE_INGEST_TOKEN"])
    files = 1 + sum(len(t) for t in groups.values())
    sys.stdout.write(f"starforge: fetched {files} files, {total} bytes in {time.monotonic() - started:.1f}s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
