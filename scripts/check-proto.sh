#!/usr/bin/env bash
# Proto hygiene for CI: buf lint, gen/ freshness, and no wire-breaking change against the
# previous commit's proto/ (Envoy must keep understanding us).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

buf lint

buf generate
if [ -n "$(git status --porcelain -- gen/)" ]; then
  echo "check-proto: gen/ is stale; run 'make generate' and commit gen/:" >&2
  git status --porcelain -- gen/ >&2
  exit 1
fi

if prev=$(git rev-parse -q --verify HEAD~1 2>/dev/null) && git cat-file -e "$prev:proto" 2>/dev/null; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  git archive "$prev" proto | tar -x -C "$tmp"
  buf breaking proto --against "$tmp/proto"
  echo "check-proto: no wire-breaking change against ${prev:0:12}"
else
  echo "check-proto: no previous commit with proto/; breaking check skipped"
fi
