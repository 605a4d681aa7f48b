#!/usr/bin/env bash
# Build the gang-scheduler image from the Dockerfile without a container daemon, then
# run it: `--version`, the demo, and `run` against the API emulator
# (docs/operator-guide.md, "Building the image").
#
#   sudo scripts/build-image.sh            # as root: buildah with the vfs storage driver
#
# Needs Debian's `buildah` and `mmdebstrap` (apt-get install buildah mmdebstrap), the
# project's .venv (for the emulator the last check runs), and the network to Debian's
# package archive and PyPI only. The Dockerfile's base, python:3.11-slim, comes from a
# container registry; where none is reachable, BASE=debian (the default here) builds
# an equivalent base from Debian's packages instead: bookworm's python3 (3.11) and pip,
# as the image's only Python, tagged localhost/python:3.11-bookworm and passed as the
# Dockerfile's PYTHON_IMAGE. BASE=registry uses the Dockerfile's own default.
set -euo pipefail
cd "$(dirname "$0")/.."

WORK=${WORK:-/tmp/gang-scheduler-image}
BASE=${BASE:-debian}
SUITE=bookworm  # Debian 12: Python 3.11, the version the Dockerfile's base has
VERSION=$(python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
IMAGE=localhost/gang-scheduler:${VERSION}
BASE_IMAGE=localhost/python:3.11-${SUITE}
buildah() { command buildah --storage-driver vfs "$@"; }
# RUN steps and the checks in a chroot, not an OCI runtime: crun refuses where the
# machine's cgroups are in hybrid mode (as inside another container), and a chroot needs
# no cgroups. The builds are the same; only the isolation of the steps differs.
export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}
mkdir -p "$WORK"

step() { printf '\n$ %s\n' "$*"; }

if [ "$BASE" = debian ]; then
    # Kept between runs (about two minutes to make): delete it to take newer packages.
    if [ ! -s "$WORK/rootfs.tar" ]; then
        step "mmdebstrap --variant=minbase --include=python3,python3-pip,ca-certificates $SUITE rootfs.tar"
        mmdebstrap --quiet --variant=minbase --include=python3,python3-pip,ca-certificates \
            "$SUITE" "$WORK/rootfs.tar"
    fi
    base=$(buildah from scratch)
    buildah add --quiet "$base" "$WORK/rootfs.tar" /
    # The image's Python is its own, as python:3.11-slim's is: pip may install into it
    # (Debian marks the system Python as managed by apt, PEP 668).
    rm -f "$(buildah mount "$base")/usr/lib/python3.11/EXTERNALLY-MANAGED"
    buildah umount "$base" >/dev/null
    buildah config --env LANG=C.UTF-8 --cmd python3 "$base"
    buildah commit --quiet --rm "$base" "$BASE_IMAGE" >/dev/null
    build_args=(--build-arg "PYTHON_IMAGE=$BASE_IMAGE")
else
    build_args=()
fi

# This machine's CA bundle, mounted over the image's for the RUN steps only (never
# copied into a layer): where the way to PyPI goes through a TLS proxy with its own CA,
# pip in the image must trust it too. Debian's pip reads this file (python:3.11-slim's
# pip reads certifi's own bundle instead). HOST_CA= (empty) mounts nothing.
HOST_CA=${HOST_CA-/etc/ssl/certs/ca-certificates.crt}
if [ -n "$HOST_CA" ]; then
    build_args+=(--volume "$HOST_CA:/etc/ssl/certs/ca-certificates.crt:ro")
fi

step "buildah bud --network host ${build_args[*]} --build-arg VERSION=$VERSION -t $IMAGE ."
buildah bud --quiet --layers=false --network host "${build_args[@]}" \
    --build-arg "VERSION=$VERSION" -t "$IMAGE" . >/dev/null
buildah images --format '{{.Name}}:{{.Tag}} {{.ID}} {{.Size}}' "$IMAGE"
buildah inspect --format '{{.OCIv1.Config.User}} {{.OCIv1.Config.Entrypoint}} {{.OCIv1.Config.Cmd}}' "$IMAGE"

ctr=$(buildah from --quiet "$IMAGE")
cleanup() {
    [ -n "${emulator:-}" ] && kill "$emulator" 2>/dev/null
    buildah rm "$ctr" >/dev/null 2>&1 || true
}
trap cleanup EXIT
# buildah run does not run the entrypoint: the commands name it, as `docker run IMAGE
# ARGS` would run `gang-scheduler ARGS`. --user: the image's own non-root user.
in_image() { buildah run --network host --user 65532:65532 "$@"; }

step "gang-scheduler --version"
in_image "$ctr" -- gang-scheduler --version

step "gang-scheduler demo"
in_image "$ctr" -- gang-scheduler demo

# `run` against the API emulator on this machine (host network): one node with 8 GPUs,
# one gang of two pods, the scheduler in the image binding them.
step "gang-scheduler run --kubeconfig /kubeconfig (the API emulator on the host)"
.venv/bin/python -m tests.kubeapi --port 0 --kubeconfig "$WORK/kubeconfig" >"$WORK/emulator.log" &
emulator=$!
for _ in $(seq 50); do grep -q listening "$WORK/emulator.log" && break; sleep 0.2; done
chmod 644 "$WORK/kubeconfig"
.venv/bin/python scripts/image_smoke.py "$WORK/kubeconfig" seed
# buildah itself, not through a function, so that $! is buildah's own process: it passes
# the SIGTERM below on to the scheduler, which shuts down cleanly.
command buildah --storage-driver vfs run --network host --user 65532:65532 \
    -v "$WORK/kubeconfig:/kubeconfig:ro" "$ctr" -- \
    gang-scheduler run --kubeconfig /kubeconfig >"$WORK/run.log" 2>&1 &
scheduler=$!
status=0
.venv/bin/python scripts/image_smoke.py "$WORK/kubeconfig" wait --timeout 60 || status=$?
kill -TERM "$scheduler" 2>/dev/null || true
wait "$scheduler" 2>/dev/null || true
echo "(the scheduler's first log lines)"
head -n 5 "$WORK/run.log"
exit "$status"
