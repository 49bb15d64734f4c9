#!/usr/bin/env bash
# Build ptserve's CPU image with buildah (no Docker daemon needed): `make image`.
#
#   IMAGE       tag of the result (default localhost/ptserve:cpu)
#   BASE        base image; "local" (default) makes one with base.sh from the Debian mirror, for
#               hosts that reach no container registry. Any other value is passed on, e.g.
#               BASE=docker.io/library/python:3.11.14-slim-bookworm (the Dockerfile's default).
#   TORCH_WHEEL a torch CPU wheel to install instead of downloading one; by default one for
#               Python 3.11 is looked for in pip's find-links folders (PIP_FIND_LINKS).
#   DOCKERFILE  default deploy/image/Dockerfile
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/deploy/image"
image="${IMAGE:-localhost/ptserve:cpu}"
base="${BASE:-local}"
dockerfile="${DOCKERFILE:-$here/Dockerfile}"
torch_version="$(sed -n 's/^ARG TORCH_VERSION=//p' "$dockerfile")"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"

build_args=()
if [ "$base" = local ]; then
    base=localhost/ptserve-base:bookworm
    "$here/base.sh" "$base"
fi
build_args+=(--build-arg "BASE=$base")

# A local torch wheel saves a download of the CPU build (and is the only way without one).
rm -f "$here"/wheels/*.whl
wheel="${TORCH_WHEEL:-}"
if [ -z "$wheel" ]; then
    for dir in ${PIP_FIND_LINKS:-} $(pip config get global.find-links 2>/dev/null || true); do
        found="$(find "$dir" -maxdepth 1 -name "torch-${torch_version}+cpu-cp311-*.whl" 2>/dev/null | head -n 1)"
        if [ -n "$found" ]; then wheel="$found"; break; fi
    done
fi
if [ -n "$wheel" ]; then
    echo "using the torch wheel $wheel"
    ln "$wheel" "$here/wheels/" 2>/dev/null || cp "$wheel" "$here/wheels/"
fi
trap 'rm -f "$here"/wheels/*.whl' EXIT

# A host whose pip trusts an extra certificate authority (a TLS-inspecting proxy) lends it to
# the build's RUN steps; nothing of it stays in the image.
volumes=()
cert="${PIP_CERT:-$(pip config get global.cert 2>/dev/null || true)}"
if [ -n "$cert" ] && [ -f "$cert" ]; then
    conf="$(mktemp)"
    printf '[global]\ncert = /etc/ssl/certs/build-host-ca.pem\n' > "$conf"
    trap 'rm -f "$here"/wheels/*.whl "$conf"' EXIT
    volumes+=(--volume "$cert:/etc/ssl/certs/build-host-ca.pem:ro" --volume "$conf:/etc/pip.conf:ro")
fi

buildah build --format docker --layers --file "$dockerfile" --tag "$image" \
    "${build_args[@]}" "${volumes[@]}" "$root"
podman image inspect --format '{{.Size}}' "$image" |
    awk -v image="$image" '{ printf "%s: %.0f MB\n", image, $1 / 1e6 }'
