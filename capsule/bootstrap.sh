#!/bin/sh
# StarForge capsule bootstrap: the first thing an executor runs in the training container.
#
#   sh "$FORGE_CAPSULE_DIR/bootstrap.sh"
#
# 1. Find the image's Python: $FORGE_PYTHON, else python3, else python (none: exit 98).
# 2. exec it once (-I, isolated) with the program below, which in that one interpreter:
#    a. refuses a Python older than 3.10 (exit 98; the check parses on any Python, 2.7 included);
#    b. checks capsule.json against $FORGE_CAPSULE_SHA256 (the trust root, from the
#       LaunchRequest), then every file capsule.json lists (root "capsule" = $FORGE_CAPSULE_DIR,
#       root "workspace" = $FORGE_WORKSPACE_DIR), with the interpreter's own stdlib, before any
#       runner code runs. Any difference: "starforge: capsule integrity check failed: <root>/<path>:
#       expected sha256 <x>, found <y>" (or ": missing") on stderr, exit 97;
#    c. starts the runner named in capsule.json (runner-<sha16>.pex, itself a listed, verified
#       file): the runner venv the executor installed for this very runner and interpreter
#       (FORGE_PEX_VENV, FORGE_PEX_RUNNER, FORGE_PEX_PYTHON: root-owned, not writable by anyone
#       else, checked here) is exec'd directly; otherwise the pex itself runs in this interpreter
#       (runpy: what `python -I runner.pex` does, without a second interpreter start).
#
# The process runtime with job uids forks its runners from a warm process instead
# (sfrunner.zygote): that process runs the Python program below with another __name__, for its
# functions (checked_runner, set_aside_job_pex_env, shared_venv), and then the runner itself.
#
# POSIX sh only (dash, busybox ash); no coreutils needed beyond the shell itself.

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

# The pex unpacks its bootstrap and wheels under PEX_ROOT and runs them from there. PEX_ROOT is
# the executor's (a job's own arrives as FORGE_JOB_ENV_PEX_ROOT, for its command); without one,
# the per-attempt scratch directory, which is always writable (the image's HOME may not be).
if [ -z "${PEX_ROOT:-}" ] && [ -n "${FORGE_SCRATCH_DIR:-}" ]; then
	PEX_ROOT=$FORGE_SCRATCH_DIR/.pex
	export PEX_ROOT
fi


# --- 2. One interpreter: version, integrity, then the runner ----------------------------------
# -I (isolated): PYTHONPATH, user site-packages and the working directory (the job's workspace)
# cannot replace hashlib, json or runpy here. No single quote may appear in this program (it is a
# single-quoted shell word). The version check comes first and parses on any Python; sys.argv[1]
# is the interpreter as bootstrap found it.
BOOT='
import sys
if sys.version_info < (3, 10):
    sys.stderr.write("starforge: %s is Python %d.%d; the StarForge runner needs Python 3.10 or newer (or set FORGE_PYTHON)\n" % (sys.argv[1], sys.version_info[0], sys.version_info[1]))
    sys.exit(98)

import hashlib, json, os, re, stat

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


def verify():
    """The verified runner file name (capsule.json and every file it lists match), or exit 97."""
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
    return runner


def root_only(path):
    """path, its target and every directory above them are root-owned and writable by root alone
    (a root-owned sticky directory such as /tmp may be writable by others: nobody else can rename
    or remove what root put in it)."""
    try:
        for p in (path, os.path.realpath(path)):
            while True:
                st = os.lstat(p)
                if st.st_uid != 0:
                    return False
                if not stat.S_ISLNK(st.st_mode) and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                    if not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX):
                        return False
                parent = os.path.dirname(p)
                if parent == p:
                    break
                p = parent
    except OSError:
        return False
    return True


def shared_venv(runner):
    """The executor-installed venv of this runner for this interpreter, or None: FORGE_PEX_* come
    from the executor, but the job may set its own environment, so the venv is used only when
    root owns it and nobody else can change it."""
    venv = os.environ.get("FORGE_PEX_VENV", "")
    if not venv.startswith("/") or os.environ.get("FORGE_PEX_RUNNER") != runner:
        return None
    if os.environ.get("FORGE_PEX_PYTHON") != sys.argv[1]:
        return None
    python, main = os.path.join(venv, "bin", "python"), os.path.join(venv, "pex")
    if not (root_only(python) and root_only(main) and os.path.isfile(main)):
        return None
    return python, main


def checked_runner():
    """verify(), with a failure of the check itself also exit 97."""
    try:
        return verify()
    except SystemExit:
        raise
    except BaseException as exc:
        say("the check itself failed: %s: %s" % (type(exc).__name__, exc))
        sys.exit(97)


def set_aside_job_pex_env():
    """PEX_* set by the job (--env; PEX_ROOT belongs to the executor, see above) would change what
    runner.pex runs: another module or script, an interpreter, more sys.path, in the process that
    reads the run token. Set aside under FORGE_JOB_ENV_; the runner gives them back to the
    training command."""
    for key in [k for k in os.environ if k.startswith("PEX_") and k != "PEX_ROOT"]:
        os.environ["FORGE_JOB_ENV_" + key] = os.environ.pop(key)


def main():
    runner = checked_runner()
    set_aside_job_pex_env()
    pex = os.path.join(os.environ["FORGE_CAPSULE_DIR"], runner)
    venv = shared_venv(runner)
    if venv is not None:
        os.execv(venv[0], [venv[0], "-I", venv[1]])
    sys.argv[:] = [pex]
    import runpy
    runpy.run_path(pex, run_name="__main__")


# A pre-forked runner (the process runtime) runs this same program with another __name__, for
# its functions: the check and the set-aside above, then the runner in its own process.
if __name__ == "__main__":
    main()
'
exec "$PY" -I -c "$BOOT" "$PY"
