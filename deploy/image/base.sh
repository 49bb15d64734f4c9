#!/usr/bin/env bash
# A local base image for builds without access to a container registry: a Debian bookworm root
# file system (python3 3.11, venv, CA certificates) made by mmdebstrap from the apt mirror, then
# imported into podman's storage. Usage: base.sh IMAGE_NAME
set -euo pipefail
name="${1:?usage: base.sh IMAGE_NAME}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
if podman image exists "$name"; then
    echo "base image $name exists"
    exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mmdebstrap --variant=apt --include=python3,python3-venv,ca-certificates \
    --aptopt='Acquire::Retries "3"' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/usr/share/doc/* "$1"/usr/share/man/*' \
    bookworm "$work/rootfs.tar" "$mirror"
podman import --change 'CMD ["python3"]' "$work/rootfs.tar" "$name"
