#!/usr/bin/env bash
# Installs h2spec (HTTP/2 conformance tests, test/integration/h2spec.test.ts) with `go install`
# into a git-ignored folder. Idempotent; fast when present. Prints the path of the binary.
# Usage: scripts/ensure-h2spec.sh [bin-dir]   (default: .bench/bin in the repository root)
#
# Pinned to v2.2.1+incompatible, the newest version the Go module proxy serves: later tags
# (v2.3.0 to v2.6.0) carry a go.mod whose module path lacks the /v2 suffix, so the proxy refuses
# them. That tag has no go.mod of its own, so Go resolves its few dependencies (x/net,
# fatih/color, cobra, pflag) at their latest versions on the first install.
set -euo pipefail
version="v2.2.1+incompatible"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-$root/.bench/bin}"
if [ ! -x "$bin/h2spec" ]; then
  go="$(command -v go || true)"
  [ -n "$go" ] || go=/usr/local/go/bin/go
  [ -x "$go" ] || { echo "ensure-h2spec: Go is required to install h2spec $version" >&2; exit 1; }
  mkdir -p "$bin"
  echo "ensure-h2spec: go install github.com/summerwind/h2spec/cmd/h2spec@$version" >&2
  GOBIN="$bin" "$go" install "github.com/summerwind/h2spec/cmd/h2spec@$version" >&2
fi
echo "$bin/h2spec"
