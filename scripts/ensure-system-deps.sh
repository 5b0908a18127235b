#!/usr/bin/env bash
# Installs the Debian packages the tests and benchmarks need when they are missing:
# redis-server (+ redis-tools for cluster set-up), memcached, openssl, chromium (the debug
# console's browser test, driven by puppeteer-core), and optionally
# nghttp2-client (h2load, for make bench).
set -euo pipefail
want=()
command -v redis-server >/dev/null 2>&1 || want+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || want+=(redis-tools)
command -v memcached >/dev/null 2>&1 || want+=(memcached)
command -v openssl >/dev/null 2>&1 || want+=(openssl)  # test certificates (TLS tests)
command -v chromium >/dev/null 2>&1 || want+=(chromium)  # headless browser (console tests)
for extra in "$@"; do
  case "$extra" in
    h2load) command -v h2load >/dev/null 2>&1 || want+=(nghttp2-client) ;;
    *) want+=("$extra") ;;
  esac
done
[ ${#want[@]} -eq 0 ] && exit 0
echo "ensure-system-deps: installing ${want[*]}" >&2
sudo_cmd=()
[ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq >&2
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${want[@]}" >&2
