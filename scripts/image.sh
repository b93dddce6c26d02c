#!/usr/bin/env bash
# Builds the batchpool server image (Dockerfile) without pulling anything: stages the release
# binary, the shared libraries it loads (as ldd lists them) and its loader, and the host's CA
# certificates into target/image/rootfs, then builds there.
#   scripts/image.sh [TAG]            # default batchpool:latest
#   BATCHPOOL_BIN=path scripts/image.sh TAG   # another build of the binary (skips cargo)
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-batchpool:latest}
bin=${BATCHPOOL_BIN:-}
if [[ -z "$bin" ]]; then
    cargo build --release --locked --bin batchpool >&2
    bin=target/release/batchpool
fi
stage=${BATCHPOOL_IMAGE_DIR:-target/image}
rm -rf "$stage"
mkdir -p "$stage/rootfs/usr/local/bin" "$stage/rootfs/tmp" "$stage/rootfs/var/lib/batchpool" "$stage/rootfs/etc/ssl/certs"
chmod 1777 "$stage/rootfs/tmp"
cp "$bin" "$stage/rootfs/usr/local/bin/batchpool"
# Each library where the loader looks for it: the same path as on this host.
ldd "$bin" | awk '/=> \// { print $3 } /^\t\// { print $1 }' | while read -r lib; do
    mkdir -p "$stage/rootfs$(dirname "$lib")"
    cp -L "$lib" "$stage/rootfs$lib"
done
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
    cp /etc/ssl/certs/ca-certificates.crt "$stage/rootfs/etc/ssl/certs/"
fi
cp Dockerfile "$stage/Dockerfile"
docker build -q -t "$tag" "$stage" >&2
echo "$tag"
