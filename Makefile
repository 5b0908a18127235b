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

docs: build ## regenerate docs/settings.md from the settings table
	node dist/src/main.js --help-markdown > docs/settings.md

.PHONY: bench docs format-check help deps system-deps generate build run test check-proto typecheck lint unit integration bench clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

node_modules/.installed: package.json package-lock.json
	npm install --no-audit --no-fund --loglevel=error
	@touch $@

deps: node_modules/.installed ## install Node 24 (if needed) and npm packages

system-deps: ## install redis-server, memcached (apt-get) when missing
	scripts/ensure-system-deps.sh

generate: deps ## regenerate gen/ from proto/
	buf generate

build: deps ## compile src/ and gen/ to dist/
	rm -rf dist && tsc -p tsconfig.build.json

run: build ## build, then run the service on the memory backend with examples/config/
	node dist/src/main.js

check-proto: deps ## buf lint, gen/ freshness, buf breaking against the previous commit
	scripts/check-proto.sh

typecheck: deps ## tsc --noEmit over src, gen, test
	tsc --noEmit -p .

lint: deps ## ESLint (type-aware), no warnings allowed
	eslint --max-warnings=0 .

format-check: deps ## Prettier check (src, test, docs)
	prettier --check .

unit: deps ## unit and component tests only
	vitest run --project unit

integration: deps system-deps build ## integration tests only (real servers)
	vitest run --project integration

test: deps system-deps check-proto typecheck lint format-check build ## everything CI runs
	vitest run

bench: deps build ## benchmark ShouldRateLimit vs a bare node:http2 floor (needs h2load; installs it)
	scripts/ensure-system-deps.sh h2load
	node dist/bench/run.js
	node dist/bench/windows.js

clean: ## remove build output
	rm -rf dist coverage
