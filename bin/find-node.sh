#!/usr/bin/env bash
# Prints the bin directory of the Node.js the launchers in bin/ run with. Each launcher runs
# it as `"$root/bin/find-node.sh" <its command name>` (the name prefixes error messages).
# - In a source checkout (scripts/ensure-node.sh exists): the project's Node, which
#   scripts/ensure-node.sh installs into .tools/ when the system one is older than 22.12.
# - In an installed package (npm install -g of the tarball; no scripts/): the `node` on PATH,
#   which must be >= 22.12. Nothing is downloaded at run time; the error says what to install.
set -euo pipefail
name="${1:-ratelimit}"
root="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)"
if [ -x "$root/scripts/ensure-node.sh" ]; then
  exec "$root/scripts/ensure-node.sh"
fi
node_path="$(command -v node || true)"
if [ -z "$node_path" ]; then
  echo "$name: Node.js >= 22.12 is required, and no 'node' is on PATH; install Node.js 22.12 or later (24 LTS recommended)" >&2
  exit 1
fi
if ! found="$("$node_path" -e 'const [a,b]=process.versions.node.split(".").map(Number);process.stdout.write(process.version);process.exit(a>22||(a===22&&b>=12)?0:1)' 2>/dev/null)"; then
  echo "$name: Node.js >= 22.12 is required, and $node_path is ${found:-not a working Node.js}; install Node.js 22.12 or later (24 LTS recommended) ahead of it on PATH" >&2
  exit 1
fi
dirname "$node_path"
