#!/usr/bin/env bash
# Installs the Go load tools `make bench` drives: ghz (gRPC load) and vegeta (HTTP load at a
# fixed rate), with `go install` into a git-ignored folder. Idempotent; fast when present.
# Usage: scripts/ensure-go-tools.sh [bin-dir]   (default: .bench/bin in the repository root)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${1:-$root/.bench/bin}"
go="$(command -v go || true)"
[ -n "$go" ] || go=/usr/local/go/bin/go
mkdir -p "$bin"
install() {
  local name="$1" module="$2"
  [ -x "$bin/$name" ] && return 0
  [ -x "$go" ] || { echo "ensure-go-tools: Go is required to install $name ($module)" >&2; exit 1; }
  echo "ensure-go-tools: go install $module" >&2
  GOBIN="$bin" "$go" install "$module" >&2
}
install ghz github.com/bojand/ghz/cmd/ghz@latest
install vegeta github.com/tsenart/vegeta/v12@latest
echo "$bin"
