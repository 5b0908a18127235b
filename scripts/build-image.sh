#!/usr/bin/env bash
# Builds the service's container image from Containerfile with buildah (no daemon, no
# registry): on the local base of scripts/ensure-image-base.sh (prepared when missing), or on
# BASE_IMAGE when it is set (e.g. docker.io/library/node:24-bookworm-slim where a registry is
# reachable). Build progress goes to stderr; the last line on stdout is the image's name.
# RLS_IMAGE overrides the name (default localhost/ratelimit-ts:latest).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
image="${RLS_IMAGE:-localhost/ratelimit-ts:latest}"
if [ -n "${BASE_IMAGE:-}" ]; then
  base="$BASE_IMAGE"
  "$root/scripts/ensure-image-base.sh" --tools
else
  base="$("$root/scripts/ensure-image-base.sh")"
fi
# chroot isolation: no user namespaces or OCI runtime needed; the build's RUN steps share the
# host's network (npm ci reaches the npm registry as this machine does). --layers caches each
# step, so a rebuild after a source change reuses the npm ci layer. The Docker format keeps
# HEALTHCHECK, which the OCI format drops.
# A CA bundle of this machine's (which may add a local authority re-signing HTTPS egress) goes
# to npm ci as a build secret, never into the image.
secret=()
ca_file="${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}"
[ -s "$ca_file" ] && secret=(--secret "id=ca-certificates,src=$ca_file")
buildah bud --isolation chroot --network host --layers --force-rm --format docker \
  ${secret[@]+"${secret[@]}"} --build-arg "BASE_IMAGE=$base" \
  --file "$root/Containerfile" --tag "$image" "$root" >&2
echo "$image"
