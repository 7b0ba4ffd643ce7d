#!/usr/bin/env bash
# Builds the image the docker-runtime tests run capsules in: starforge-test-python:bookworm, a
# Debian bookworm minbase root with python3 and numpy (bootstrap.sh needs the image's own Python).
#
# There is no image registry here, so the image is made from a root file system:
#   debootstrap --variant=minbase --include=python3,python3-numpy bookworm DIR   (~35-60 s, once)
#   tar -C DIR -c . | docker import - starforge-test-python:bookworm
# The root file system is cached as a tarball under build/, so a fresh dockerd data root imports
# it again in seconds. Nothing is done when the image is already present.
#
# usage: tools/build_test_image.sh [--rootfs-only]
#   DOCKER_HOST        the engine to import into (unix:///.../docker.sock); required unless --rootfs-only
#   STARFORGE_BUILD    build directory (default: <repo>/build)
#   DEBIAN_MIRROR      mirror for debootstrap (default: the first deb.debian.org-style URI apt uses)
set -euo pipefail

IMAGE=starforge-test-python:bookworm
root=$(cd "$(dirname "$0")/.." && pwd)
build=${STARFORGE_BUILD:-$root/build}
cache=$build/test-image
tarball=$cache/starforge-test-python-bookworm.tar
rootfs_only=0
[ "${1:-}" = "--rootfs-only" ] && rootfs_only=1

log() { echo "build_test_image: $*" >&2; }

mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  local uri
  uri=$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null \
    | grep -v security | head -n1 | awk '{print $2}') || true
  echo "${uri:-http://deb.debian.org/debian}"
}

if [ "$rootfs_only" = 0 ]; then
  : "${DOCKER_HOST:?set DOCKER_HOST to the engine to import into (unix:///.../docker.sock)}"
  if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "$IMAGE already present"
    exit 0
  fi
fi

if [ ! -s "$tarball" ]; then
  command -v debootstrap >/dev/null || { log "debootstrap is not installed (apt-get install debootstrap)"; exit 1; }
  mkdir -p "$cache"
  dir=$(mktemp -d "$cache/rootfs.XXXXXX")
  trap 'rm -rf "$dir" "$tarball.tmp"' EXIT
  start=$(date +%s)
  log "debootstrap bookworm into $dir (mirror $(mirror))"
  if ! debootstrap --variant=minbase --include=python3,python3-numpy bookworm "$dir" "$(mirror)" \
      >"$cache/debootstrap.log" 2>&1; then
    log "debootstrap failed; last lines of $cache/debootstrap.log:"
    tail -n 30 "$cache/debootstrap.log" >&2
    exit 1
  fi
  # Smaller and reproducible enough: no package caches or lists in the image.
  rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/debootstrap
  tar --numeric-owner -C "$dir" -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  rm -rf "$dir"
  trap - EXIT
  log "root file system cached at $tarball in $(( $(date +%s) - start )) s"
fi

[ "$rootfs_only" = 1 ] && exit 0

start=$(date +%s)
docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  - "$IMAGE" <"$tarball" >/dev/null
log "imported $IMAGE in $(( $(date +%s) - start )) s"
