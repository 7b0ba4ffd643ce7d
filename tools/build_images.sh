#!/usr/bin/env bash
# Builds the StarForge OCI images (`make images`): starforge-control, starforge-executor and
# starforge-forgelet, from deploy/images/<service>.Dockerfile, each FROM $IMAGE_BASE.
#
# No registry is assumed reachable, for pip or for images:
#   - the wheelhouse (the StarForge wheel from dist/ and every dependency, cp311 manylinux, plus
#     pip itself) is downloaded on this machine from its package index into build/images/wheels
#     (kept between runs), then copied into the build context (build/images/context);
#   - pip inside the build runs with --no-index, and the build runs with --network=none;
#   - IMAGE_BASE must already be on the engine (python:3.11-slim-bookworm, or the tests'
#     starforge-test-python:bookworm made by tools/build_test_image.sh).
# The install stage is the same in the three Dockerfiles: the second and third builds reuse it.
#
# usage: tools/build_images.sh [SERVICE...]        (default: control executor forgelet)
#   DOCKER_HOST   the engine to build on (default: the docker CLI's own)
#   IMAGE_BASE    base image (default python:3.11-slim-bookworm)
#   IMAGE_TAG     tag (default: the version in pyproject.toml); :latest is tagged too
#   DIST_WHEEL    the StarForge wheel (default dist/starforge-<version>-py3-none-any.whl)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n1)
base=${IMAGE_BASE:-python:3.11-slim-bookworm}
tag=${IMAGE_TAG:-$version}
wheel=${DIST_WHEEL:-dist/starforge-$version-py3-none-any.whl}
pip=${PIP:-$root/.venv/bin/pip}
wheels=build/images/wheels
context=build/images/context
services=("$@")
[ ${#services[@]} -eq 0 ] && services=(control executor forgelet)

log() { echo "build_images: $*" >&2; }

[ -f "$wheel" ] || { log "$wheel is missing: run \`make dist\` first"; exit 1; }
for s in "${services[@]}"; do
  [ -f "deploy/images/$s.Dockerfile" ] || { log "no deploy/images/$s.Dockerfile (services: control executor forgelet)"; exit 1; }
done
if ! docker image inspect "$base" >/dev/null 2>&1; then
  log "base image $base is not on the engine (${DOCKER_HOST:-default}); no registry is used: load or import it first"
  exit 1
fi

# The wheelhouse: binary wheels for CPython 3.11 on glibc x86-64 (any manylinux up to 2.36,
# bookworm's glibc), whatever this machine's own platform is. The constraints pin the versions
# the tests ran with.
platforms=()
for i in $(seq 5 36); do platforms+=(--platform "manylinux_2_${i}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64 --platform any)
mkdir -p "$wheels"
start=$(date +%s)
# Downloaded again only when what decides it changed: the wheel's requirements or the lock.
key=$("${PYTHON:-python3}" - "$wheel" <<'PY'
import hashlib, pathlib, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = [z.read(n) for n in z.namelist() if n.endswith(".dist-info/METADATA")]
reqs = b"\n".join(l for m in meta for l in m.splitlines() if l.startswith(b"Requires-Dist:"))
print(hashlib.sha256(reqs + pathlib.Path("requirements.lock").read_bytes()).hexdigest()[:16])
PY
)
if [ -f "$wheels/.complete-$key" ]; then
  log "wheelhouse: up to date ($wheels)"
else
  if ! "$pip" download --quiet --disable-pip-version-check --dest "$wheels" --only-binary=:all: \
    --find-links "$(dirname "$wheel")" \
    --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none "${platforms[@]}" \
    -c requirements.lock "$wheel" pip >"$wheels/.download.log" 2>&1; then
    grep -v "is ignored: it is neither a file nor a directory" "$wheels/.download.log" >&2 || true
    log "pip download of the wheelhouse failed (above; every dependency needs a cp311 manylinux or pure wheel)"
    exit 1
  fi
  rm -f "$wheels"/.complete-*
  touch "$wheels/.complete-$key"
fi
# Only what this wheel needs goes into the context: the wheel, then the other wheels of the
# closure (an older starforge wheel left in $wheels is not copied). `make dist` writes a new file
# each time (zip timestamps); when the previous build's wheel holds the same files (its RECORD:
# every file's SHA-256), that one stays, so the engine's build cache still applies.
same_files() {
  "${PYTHON:-python3}" - "$1" "$2" <<'PY'
import sys, zipfile
def record(path):
    with zipfile.ZipFile(path) as z:
        return sorted(z.read(n) for n in z.namelist() if n.endswith(".dist-info/RECORD"))
sys.exit(0 if record(sys.argv[1]) == record(sys.argv[2]) else 1)
PY
}
kept=""
previous="$context/wheels/$(basename "$wheel")"
if [ -f "$previous" ] && same_files "$previous" "$wheel"; then
  kept=$(mktemp -d)
  mv "$previous" "$kept/"
fi
rm -rf "$context"
mkdir -p "$context/wheels"
if [ -n "$kept" ]; then
  mv "$kept/$(basename "$wheel")" "$context/wheels/" && rmdir "$kept"
  log "$(basename "$wheel") has the same files as the last build's: keeping that one (build cache)"
else
  cp "$wheel" "$context/wheels/"
fi
# The API wheel (tools/api_wheel.py, same version, reproducible bytes) comes from dist/ each time: the
# wheelhouse's copy may be of older protos of the same version.
api_wheel="$(dirname "$wheel")/starforge_api-$version-py3-none-any.whl"
[ -f "$api_wheel" ] || { log "$api_wheel is missing: run \`make dist\`"; exit 1; }
cp "$api_wheel" "$context/wheels/"
for f in "$wheels"/*.whl; do
  case "$(basename "$f")" in starforge-* | starforge_api-*) continue ;; esac
  cp -l "$f" "$context/wheels/" 2>/dev/null || cp "$f" "$context/wheels/"
done
log "wheelhouse: $(find "$context/wheels" -name '*.whl' | wc -l) wheels ($(du -sh "$context/wheels" | cut -f1)) in $(( $(date +%s) - start )) s"

for s in "${services[@]}"; do
  start=$(date +%s)
  docker build --quiet --network=none --build-arg "BASE=$base" \
    --label "org.opencontainers.image.title=starforge-$s" \
    --label "org.opencontainers.image.version=$version" \
    -f "deploy/images/$s.Dockerfile" -t "starforge-$s:$tag" -t "starforge-$s:latest" "$context" >/dev/null
  log "starforge-$s:$tag (FROM $base) in $(( $(date +%s) - start )) s"
done
