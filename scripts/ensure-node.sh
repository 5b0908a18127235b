#!/usr/bin/env bash
# Prints the bin directory of a Node.js >= 22.12 for this project, installing Node 24 from the
# npm registry (the `node` package ships the binary) into .tools/ when the system one is older.
# Progress goes to stderr; stdout carries only the directory.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
local_dir="$root/.tools/node"
local_bin="$local_dir/node_modules/node/bin"

node_ok() { # $1 = node binary
  "$1" -e 'const [a,b]=process.versions.node.split(".").map(Number);process.exit(a>22||(a===22&&b>=12)?0:1)' >/dev/null 2>&1
}

if [ -x "$local_bin/node" ] && node_ok "$local_bin/node"; then
  echo "$local_bin"; exit 0
fi
if command -v node >/dev/null 2>&1 && node_ok "$(command -v node)"; then
  dirname "$(command -v node)"; exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "ensure-node: no npm found; installing Debian's npm to fetch Node 24" >&2
  if [ "$(id -u)" = 0 ]; then apt-get update -qq >&2 && apt-get install -y -qq npm >&2
  else sudo apt-get update -qq >&2 && sudo apt-get install -y -qq npm >&2; fi
fi
echo "ensure-node: system Node is missing or older than 22.12; installing Node 24 into .tools/node" >&2
mkdir -p "$local_dir"
# A package.json of its own, so npm installs here and not into the project found further up.
[ -f "$local_dir/package.json" ] || echo '{ "name": "project-node", "private": true }' > "$local_dir/package.json"
(cd "$local_dir" && npm install --no-audit --no-fund --loglevel=error node@24 >&2)
if ! node_ok "$local_bin/node"; then
  echo "ensure-node: Node 24 install failed (see above)" >&2; exit 1
fi
echo "$local_bin"
