#!/bin/sh
# StarForge capsule bootstrap: the first thing an executor runs in the training container.
#
#   sh "$FORGE_CAPSULE_DIR/bootstrap.sh"
#
# 1. Find the image's Python: $FORGE_PYTHON, else python3, else python (none, or older than
#    3.10: exit 98).
# 2. Check capsule.json against $FORGE_CAPSULE_SHA256 (the trust root, from the LaunchRequest),
#    then every file capsule.json lists (root "capsule" = $FORGE_CAPSULE_DIR, root "workspace" =
#    $FORGE_WORKSPACE_DIR), with the image's own Python stdlib, before anything else runs. Any
#    difference: "starforge: capsule integrity check failed: <root>/<path>: expected sha256 <x>,
#    found <y>" (or ": missing") on stderr, exit 97.
# 3. exec the runner named in capsule.json (runner-<sha16>.pex, itself a listed, verified file).
#
# POSIX sh only (dash, busybox ash); no coreutils needed beyond the shell itself (mkdir and ln
# only where the executor offers a shared runner venv: the process runtime, on its own host).

set -u

say() {
	printf 'starforge: %s\n' "$*" >&2
}

if [ -z "${FORGE_CAPSULE_DIR:-}" ] || [ -z "${FORGE_WORKSPACE_DIR:-}" ] || [ -z "${FORGE_CAPSULE_SHA256:-}" ]; then
	say "capsule integrity check failed: FORGE_CAPSULE_DIR, FORGE_WORKSPACE_DIR and FORGE_CAPSULE_SHA256 must be set (the executor sets them)"
	exit 97
fi

# --- 1. Python ------------------------------------------------------------------------------
if [ -n "${FORGE_PYTHON:-}" ]; then
	PY=$FORGE_PYTHON
	if ! command -v "$PY" >/dev/null 2>&1; then
		say "FORGE_PYTHON=$PY is not an executable Python"
		exit 98
	fi
else
	PY=$(command -v python3 2>/dev/null || command -v python 2>/dev/null || true)
	if [ -z "$PY" ]; then
		say "no python3 or python in the image (PATH=${PATH:-}); the StarForge runner needs Python 3.10 or newer (or set FORGE_PYTHON)"
		exit 98
	fi
fi

# Works on any Python, 2.7 included, so that an old one gets a clear message.
PY_VERSION=$("$PY" -E -c 'import sys; sys.stdout.write("%d %d" % sys.version_info[:2])' 2>/dev/null) || PY_VERSION=""
PY_MAJOR=${PY_VERSION% *}
PY_MINOR=${PY_VERSION#* }
case "$PY_MAJOR$PY_MINOR" in
'' | *[!0-9]*)
	say "$PY does not run; the StarForge runner needs Python 3.10 or newer (or set FORGE_PYTHON)"
	exit 98
	;;
esac
if [ "$PY_MAJOR" -lt 3 ] || { [ "$PY_MAJOR" -eq 3 ] && [ "$PY_MINOR" -lt 10 ]; }; then
	say "$PY is Python $PY_MAJOR.$PY_MINOR; the StarForge runner needs Python 3.10 or newer (or set FORGE_PYTHON)"
	exit 98
fi

# --- 2. Integrity -----------------------------------------------------------------------------
# Run with -I (isolated): PYTHONPATH and user site-packages cannot replace hashlib or json here.
# No single quote may appear in this program (it is a single-quoted shell word).
VERIFY='
import hashlib, json, os, re, sys

CHUNK = 1 << 20
MAX_REPORTED = 20
buf = bytearray(CHUNK)
view = memoryview(buf)


def say(text):
    sys.stderr.write("starforge: capsule integrity check failed: " + text + "\n")


def fail(text):
    say(text)
    sys.exit(97)


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                return h.hexdigest()
            h.update(view[:n])


def safe(path):
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path or "\0" in path:
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


capsule_dir = os.environ["FORGE_CAPSULE_DIR"]
roots = {"capsule": capsule_dir, "workspace": os.environ["FORGE_WORKSPACE_DIR"]}
want = os.environ["FORGE_CAPSULE_SHA256"].strip().lower()
try:
    with open(os.path.join(capsule_dir, "capsule.json"), "rb") as f:
        raw = f.read()
except OSError:
    fail("capsule/capsule.json: missing")
found = hashlib.sha256(raw).hexdigest()
if found != want:
    fail("capsule/capsule.json: expected sha256 %s, found %s" % (want, found))
try:
    doc = json.loads(raw.decode("utf-8"))
except ValueError as exc:
    fail("capsule/capsule.json: not valid JSON (%s)" % exc)
if not isinstance(doc, dict) or doc.get("schema") != "starforge.capsule/v2":
    fail("capsule/capsule.json: schema is not starforge.capsule/v2")
files = doc.get("files")
if not isinstance(files, list):
    fail("capsule/capsule.json: files is not a list")

bad = []
verified = set()
for entry in files:
    root = entry.get("root") if isinstance(entry, dict) else None
    path = entry.get("path") if isinstance(entry, dict) else None
    if root not in roots or not safe(path):
        fail("capsule/capsule.json: bad file entry %r" % (entry,))
    want_file = str(entry.get("sha256", "")).lower()
    try:
        got = digest(os.path.join(roots[root], *path.split("/")))
    except FileNotFoundError:
        bad.append("%s/%s: missing" % (root, path))
        continue
    except OSError as exc:
        bad.append("%s/%s: unreadable (%s)" % (root, path, exc.strerror or exc))
        continue
    if got != want_file:
        bad.append("%s/%s: expected sha256 %s, found %s" % (root, path, want_file, got))
    else:
        verified.add((root, path))
if bad:
    for line in bad[:MAX_REPORTED]:
        say(line)
    if len(bad) > MAX_REPORTED:
        say("... and %d more files" % (len(bad) - MAX_REPORTED))
    sys.exit(97)

runner = doc.get("runner")
if not isinstance(runner, str) or not re.match(r"^runner-[0-9a-f]{16}\.pex$", runner):
    fail("capsule/capsule.json: runner %r is not runner-<sha16>.pex" % (runner,))
if ("capsule", runner) not in verified:
    fail("capsule/%s: not listed in capsule.json" % runner)
sys.stdout.write(runner)
'
RUNNER=$("$PY" -I -c "$VERIFY")
STATUS=$?
if [ "$STATUS" -ne 0 ]; then
	if [ "$STATUS" -ne 97 ]; then
		say "capsule integrity check failed: the check itself failed with exit code $STATUS"
	fi
	exit 97
fi

# --- 3. The runner ----------------------------------------------------------------------------
# The pex unpacks its wheels under PEX_ROOT; the per-attempt scratch directory is always writable
# (the image's HOME may not be).
if [ -z "${PEX_ROOT:-}" ] && [ -n "${FORGE_SCRATCH_DIR:-}" ]; then
	PEX_ROOT=$FORGE_SCRATCH_DIR/.pex
	export PEX_ROOT
fi
# A runner venv the executor installed read-only for this very interpreter (FORGE_PEX_VENVS,
# FORGE_PEX_PYTHON): linked into this attempt's own PEX_ROOT, pex finds it and execs it at once
# instead of installing one (seconds). Any other interpreter installs its own, as without it.
if [ -n "${FORGE_PEX_VENVS:-}" ] && [ "${FORGE_PEX_PYTHON:-}" = "$PY" ] && [ -n "${PEX_ROOT:-}" ] &&
	[ -d "$FORGE_PEX_VENVS" ] && [ ! -e "$PEX_ROOT/venvs" ] && [ ! -L "$PEX_ROOT/venvs" ]; then
	{ [ -d "$PEX_ROOT" ] || mkdir -p "$PEX_ROOT"; } && ln -s "$FORGE_PEX_VENVS" "$PEX_ROOT/venvs" || true
fi
exec "$PY" -I "$FORGE_CAPSULE_DIR/$RUNNER"
