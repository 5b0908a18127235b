#!/usr/bin/env bash
# Prepares what `make image` needs on a machine with no container registry, and prints the name
# of the local base image on stdout (progress goes to stderr):
#   - buildah, podman and mmdebstrap (apt-get) when missing;
#   - the local base image when missing: Debian bookworm (mmdebstrap, minbase variant, from this
#     machine's apt sources when it runs bookworm, else Debian's default mirror) plus Node 24 and
#     npm 11 from the npm registry (packages node-linux-<arch> and npm) in /usr/local, as the
#     official node:24-bookworm-slim image lays them out; imported with `podman import`.
# The base stays in the machine's container storage, so later builds reuse it.
# With --tools it only installs the tools (exit status 0 when they are there) and prints nothing.
# RLS_IMAGE_BASE overrides the base image's name (default localhost/ratelimit-node:24-bookworm).
set -euo pipefail
base="${RLS_IMAGE_BASE:-localhost/ratelimit-node:24-bookworm}"
node_major=24
npm_major=11

want=()
for tool in buildah podman mmdebstrap; do
  command -v "$tool" >/dev/null 2>&1 || want+=("$tool")
done
if [ ${#want[@]} -gt 0 ]; then
  echo "ensure-image-base: installing ${want[*]}" >&2
  sudo_cmd=()
  [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq >&2
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${want[@]}" >&2
fi

[ "${1:-}" = --tools ] && exit 0

if podman image exists "$base"; then
  echo "$base"
  exit 0
fi

case "$(uname -m)" in
  x86_64) node_arch=x64 ;;
  aarch64) node_arch=arm64 ;;
  *) echo "ensure-image-base: no Node package for $(uname -m)" >&2; exit 1 ;;
esac
if ! command -v npm >/dev/null 2>&1; then
  echo "ensure-image-base: npm is needed to fetch Node and npm for the base image" >&2; exit 1
fi

echo "ensure-image-base: building $base (bookworm minbase + Node $node_major + npm $npm_major)" >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"

# This machine's Debian mirror when it runs bookworm (a deb822 file is accepted as a mirror).
mirrors=()
if grep -qs '^VERSION_CODENAME=bookworm$' /etc/os-release &&
  [ -f /etc/apt/sources.list.d/debian.sources ]; then
  mirrors+=(/etc/apt/sources.list.d/debian.sources)
fi
# No documentation, manual pages or translations: the image only runs Node.
mmdebstrap --variant=minbase --mode=root --quiet \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
  bookworm "$rootfs" ${mirrors[@]+"${mirrors[@]}"} >&2

# Node's binary and npm, from the npm registry (each tarball unpacks into package/).
(cd "$work" && npm pack --silent "node-linux-$node_arch@$node_major" "npm@$npm_major" >/dev/null)
mkdir -p "$work/node" "$work/npm" "$rootfs/usr/local/bin" "$rootfs/usr/local/lib/node_modules"
tar -xzf "$work"/node-linux-"$node_arch"-*.tgz -C "$work/node" --strip-components=1
tar -xzf "$work"/npm-*.tgz -C "$work/npm" --strip-components=1
install -m 0755 "$work/node/bin/node" "$rootfs/usr/local/bin/node"
mv "$work/npm" "$rootfs/usr/local/lib/node_modules/npm"
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$rootfs/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$rootfs/usr/local/bin/npx"
chroot "$rootfs" /usr/local/bin/node --version >&2

tar -C "$rootfs" --numeric-owner -cf - . |
  podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["node"]' \
    - "$base" >&2
echo "$base"
