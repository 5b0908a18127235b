// The load generators `make bench` drives, both independent of this project's code: ghz (a Go
// gRPC load tool) against ShouldRateLimit, and vegeta (a Go HTTP load tool) against Envoy.
// Installed by scripts/ensure-go-tools.sh into .bench/bin.
import { existsSync } from "node:fs";
import { join } from "node:path";
import { runTool } from "./procs.js";

/** Latency percentiles in milliseconds. */
export interface Percentiles {
  readonly p50Ms: number;
  readonly p90Ms: number;
  readonly p99Ms: number;
  readonly p999Ms: number;
}

/** What one load run measured. */
export interface LoadResult extends Percentiles {
  /** Answers received (OK or not). */
  readonly count: number;
  /** Answers per second of wall-clock time over the run. */
  readonly perSecond: number;
  /** Answers that were not gRPC OK (ghz) or not HTTP 2xx/429 (vegeta). */
  readonly nonOk: number;
  /** Status → count, e.g. `{ OK: 1000 }` or `{ "200": 990, "429": 10 }`. */
  readonly statuses: Record<string, number>;
  /** The load tool's distinct error messages (at most 3), if any. */
  readonly errors?: readonly string[];
}

/** Percentiles (nearest rank) of latencies given in nanoseconds. */
export function percentilesOfNs(latenciesNs: number[]): Percentiles {
  const sorted = Float64Array.from(latenciesNs).sort();
  const at = (q: number): number => {
    if (sorted.length === 0) return 0;
    const index = Math.min(
      sorted.length - 1,
      Math.max(0, Math.ceil(q * sorted.length) - 1),
    );
    return Math.round(sorted[index]! / 10_000) / 100;
  };
  return { p50Ms: at(0.5), p90Ms: at(0.9), p99Ms: at(0.99), p999Ms: at(0.999) };
}

/** Finds a load tool in `binDir` (where scripts/ensure-go-tools.sh puts it). */
export function tool(binDir: string, name: string): string {
  const path = join(binDir, name);
  if (!existsSync(path))
    throw new Error(`${path} is missing: run scripts/ensure-go-tools.sh`);
  return path;
}

/** One ghz run against ShouldRateLimit. */
export interface GhzOptions {
  readonly ghz: string;
  /** Repository root (for proto/). */
  readonly root: string;
  /** gRPC address, `127.0.0.1:<port>`. */
  readonly address: string;
  /** Calls in flight (ghz `-c`, its workers). */
  readonly inFlight: number;
  /** HTTP/2 connections the workers share. */
  readonly connections: number;
  /** Seconds of load. */
  readonly seconds: number;
  /** Fixed rate in calls per second; omitted: as fast as the target answers (closed loop). */
  readonly rps?: number;
  /** The request as proto3 JSON; ghz template syntax (e.g. `{{.RequestNumber}}`) allowed. */
  readonly request: string;
}

interface GhzReport {
  count: number;
  total: number;
  details?: { latency: number; status: string }[];
  statusCodeDistribution?: Record<string, number>;
}

/**
 * Runs ghz and computes the result from its per-call details (ghz's own summary has no
 * p99.9). Calls still in flight when the duration ends are waited for (`--duration-stop
 * wait`), so none is reported as an error that the target did not make.
 *
 * @throws Error when ghz fails or prints no report.
 */
export async function runGhz(options: GhzOptions): Promise<LoadResult> {
  const args = [
    "--insecure",
    "--proto",
    join(options.root, "proto/envoy/service/ratelimit/v3/rls.proto"),
    "--import-paths",
    join(options.root, "proto"),
    "--call",
    "envoy.service.ratelimit.v3.RateLimitService.ShouldRateLimit",
    "-c",
    String(options.inFlight),
    "--connections",
    String(options.connections),
    "-z",
    `${options.seconds}s`,
    "--duration-stop",
    "wait",
    "--timeout",
    "10s",
    ...(options.rps !== undefined ? ["--rps", String(options.rps)] : []),
    "-d",
    options.request,
    "-O",
    "json",
    options.address,
  ];
  const run = await runTool(options.ghz, args, (options.seconds + 60) * 1000);
  if (run.stdout.trim() === "")
    throw new Error(
      `ghz printed no report (exit ${String(run.code)}): ${run.stderr}`,
    );
  const report = JSON.parse(run.stdout) as GhzReport;
  const details = report.details ?? [];
  const statuses: Record<string, number> = {};
  for (const d of details) statuses[d.status] = (statuses[d.status] ?? 0) + 1;
  const seconds = report.total / 1e9;
  return {
    count: details.length,
    perSecond: Math.round(details.length / seconds),
    nonOk: details.filter((d) => d.status !== "OK").length,
    statuses,
    ...percentilesOfNs(details.map((d) => d.latency)),
  };
}

interface VegetaReport {
  requests: number;
  rate: number;
  latencies: Record<string, number>;
  status_codes: Record<string, number> | null;
  errors: string[] | null;
}

/**
 * Sends `GET url` at a fixed `rate` per second for `seconds` with vegeta and reports its
 * latencies (vegeta's report has no p99.9: that field is its max).
 *
 * @param targets - vegeta's targets in its http format instead of `GET url` (e.g. several
 *   requests with their own headers, sent in turn)
 *
 * @throws Error when vegeta fails.
 */
export async function runVegeta(
  vegeta: string,
  url: string,
  rate: number,
  seconds: number,
  resultsFile: string,
  targets?: string,
): Promise<LoadResult> {
  const attack = await runTool(
    vegeta,
    [
      "attack",
      `-rate=${rate}/1s`,
      `-duration=${seconds}s`,
      "-timeout=10s",
      `-output=${resultsFile}`,
    ],
    (seconds + 60) * 1000,
    targets ?? `GET ${url}\n`,
  );
  if (attack.code !== 0)
    throw new Error(`vegeta attack failed: ${attack.stderr}`);
  const report = await runTool(
    vegeta,
    ["report", "-type=json", resultsFile],
    60_000,
  );
  if (report.code !== 0)
    throw new Error(`vegeta report failed: ${report.stderr}`);
  const r = JSON.parse(report.stdout) as VegetaReport;
  const ms = (name: string): number =>
    Math.round((r.latencies[name] ?? 0) / 10_000) / 100;
  const statuses = r.status_codes ?? {};
  let nonOk = 0;
  for (const [code, n] of Object.entries(statuses))
    if (!(code.startsWith("2") || code === "429")) nonOk += n;
  return {
    count: r.requests,
    perSecond: Math.round(r.rate),
    nonOk,
    statuses,
    errors: (r.errors ?? []).slice(0, 3),
    p50Ms: ms("50th"),
    p90Ms: ms("90th"),
    p99Ms: ms("99th"),
    p999Ms: ms("max"),
  };
}
