// Command-line options of `ratelimit-conformance`, parsed and checked before anything runs.
import { parseArgs } from "node:util";
import type { Backend, Flavour } from "./flavour.js";

/** How to reach the server under test. */
export type Mode =
  | {
      readonly kind: "launch";
      readonly command: string;
      readonly flavour: Flavour;
      readonly backend: Backend;
    }
  | {
      readonly kind: "running";
      readonly grpc: string;
      readonly http?: string;
      readonly configDir: string;
    };

/** The parsed options. */
export interface ConformanceOptions {
  readonly mode: Mode;
  /** Section names or slugs to run; empty: all. */
  readonly only: readonly string[];
  readonly seed: number;
  readonly json?: string;
  readonly concurrency: number;
  /** Launch mode: servers at once. */
  readonly parallel: number;
  readonly reloadTimeoutMs: number;
}

/** What the command line asked for. */
export type Parsed =
  | { readonly kind: "help" }
  | { readonly kind: "version" }
  | { readonly kind: "list" }
  | { readonly kind: "run"; readonly options: ConformanceOptions };

/** A command-line error: the message names the option. */
export class UsageError extends Error {
  override readonly name = "UsageError";
}

/** The `--help` text. */
export const usage = `Usage: ratelimit-conformance (--launch '<command>' | --target host:port --config-dir DIR) [options]

Checks a rate-limit service (Envoy RLS v3) black-box against the rate-limit service spec:
gRPC ShouldRateLimit, HTTP /json and /healthcheck, config files and the environment only.

Launch mode (the suite starts the server, once per group of sections):
  --launch '<command>'     command that starts the server (run through /bin/sh); it is given
                           its ports, config directory and store in the environment
  --flavor neutral|reference
                           environment names: the spec's (KV_*, MC_*, USE_PUSHSTATS) or the Go
                           reference's (REDIS_*, MEMCACHE_*, USE_STATSD); default neutral
  --backend memory|kv|mc   counter store; kv starts a redis-server, mc a memcached on loopback;
                           default kv

Running mode (a server already running, reloading config files on change):
  --target host:port       its gRPC address
  --http host:port         its HTTP address (/json, /healthcheck); without it those are skipped
  --config-dir DIR         the directory it loads *.yaml from; the suite writes its files there
                           (named after a random token) and removes them at the end

Options:
  --only SECTION           run only this section (name or slug; repeatable); --list shows them
  --seed N                 seed of values and order (printed by each run; replays a failure)
  --json FILE              also write the report as JSON to FILE
  --concurrency N          scenarios at once within a section (default 4)
  --parallel N             launch mode: servers (groups of sections) at once (default 3)
  --reload-timeout MS      how long a reload may take (default 10000)
  --list                   list sections and scenarios, then exit
  --version                print the version
  -h, --help               this text

Exit status: 0 when no scenario failed, 1 when one did, 2 on a usage or set-up error.
`;

function hostPort(option: string, value: string): string {
  if (!/^[^\s:]+:\d{1,5}$/.test(value))
    throw new UsageError(
      `${option} must be host:port, got ${JSON.stringify(value)}`,
    );
  return value;
}

function integer(option: string, value: string, min: number): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < min)
    throw new UsageError(
      `${option} must be an integer >= ${min}, got ${JSON.stringify(value)}`,
    );
  return n;
}

/**
 * Parses the command line (without `node` and the script).
 *
 * @param randomSeed - the seed when `--seed` is absent
 * @throws UsageError for an unknown option, a bad value, or a missing or doubled mode
 */
export function parseConformanceArgs(
  argv: readonly string[],
  randomSeed: () => number = () => Math.floor(Math.random() * 2 ** 31),
): Parsed {
  let values;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        launch: { type: "string" },
        flavor: { type: "string" },
        backend: { type: "string" },
        target: { type: "string" },
        http: { type: "string" },
        "config-dir": { type: "string" },
        only: { type: "string", multiple: true },
        seed: { type: "string" },
        json: { type: "string" },
        concurrency: { type: "string" },
        parallel: { type: "string" },
        "reload-timeout": { type: "string" },
        list: { type: "boolean" },
        help: { type: "boolean", short: "h" },
        version: { type: "boolean" },
      },
    }));
  } catch (error) {
    throw new UsageError(
      error instanceof Error ? error.message : String(error),
    );
  }
  if (values.help === true) return { kind: "help" };
  if (values.version === true) return { kind: "version" };
  if (values.list === true) return { kind: "list" };
  let mode: Mode;
  if (values.launch !== undefined) {
    if (values.target !== undefined || values["config-dir"] !== undefined)
      throw new UsageError(
        "--launch and --target/--config-dir exclude each other",
      );
    if (values.launch.trim() === "")
      throw new UsageError("--launch needs a command");
    const flavour = values.flavor ?? "neutral";
    if (flavour !== "neutral" && flavour !== "reference")
      throw new UsageError(
        `--flavor must be neutral or reference, got ${JSON.stringify(flavour)}`,
      );
    const backend = values.backend ?? "kv";
    if (backend !== "memory" && backend !== "kv" && backend !== "mc")
      throw new UsageError(
        `--backend must be memory, kv or mc, got ${JSON.stringify(backend)}`,
      );
    if (flavour === "reference" && backend === "memory")
      throw new UsageError(
        "--flavor reference has no memory backend: use --backend kv or mc",
      );
    mode = { kind: "launch", command: values.launch, flavour, backend };
  } else if (values.target !== undefined) {
    if (values["config-dir"] === undefined)
      throw new UsageError(
        "--target needs --config-dir (the directory the server loads)",
      );
    if (values.flavor !== undefined || values.backend !== undefined)
      throw new UsageError("--flavor and --backend are for --launch only");
    mode = {
      kind: "running",
      grpc: hostPort("--target", values.target),
      ...(values.http !== undefined
        ? { http: hostPort("--http", values.http) }
        : {}),
      configDir: values["config-dir"],
    };
  } else {
    throw new UsageError(
      "give --launch '<command>' or --target host:port --config-dir DIR",
    );
  }
  return {
    kind: "run",
    options: {
      mode,
      only: values.only ?? [],
      seed:
        values.seed !== undefined
          ? integer("--seed", values.seed, 0)
          : randomSeed(),
      ...(values.json !== undefined ? { json: values.json } : {}),
      concurrency:
        values.concurrency !== undefined
          ? integer("--concurrency", values.concurrency, 1)
          : 4,
      parallel:
        values.parallel !== undefined
          ? integer("--parallel", values.parallel, 1)
          : 3,
      reloadTimeoutMs:
        values["reload-timeout"] !== undefined
          ? integer("--reload-timeout", values["reload-timeout"], 100)
          : 10_000,
    },
  };
}
