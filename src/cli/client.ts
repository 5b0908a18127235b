import { readFileSync } from "node:fs";
import { create, toJsonString } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import {
  ExplainBucketResponseSchema,
  ExplainResponseSchema,
  ExplainService,
  RateLimitRequestSchema,
  RateLimitResponseSchema,
  RateLimitResponse_Code,
  RateLimitResponse_RateLimit_Unit,
  RateLimitService,
  RateLimitDescriptor_EntrySchema,
  type DescriptorExplanation,
  type RateLimitDescriptor_Entry,
  type RateLimitResponse,
  type RateLimitResponse_DescriptorStatus,
} from "../proto.js";
import { versionLine } from "../util/version.js";
import {
  formatBucketExplanation,
  formatExplanation,
} from "./explain-format.js";
import {
  overrideCommandOf,
  runOverrideCommand,
  type OverrideCommand,
} from "./overrides-client.js";
import {
  FlagError,
  flagUsage,
  isMain,
  parseGoFlags,
  type FlagSpec,
} from "./go-flags.js";

const flags = {
  dial_string: {
    kind: "string",
    default: "",
    help: "url of ratelimit server in <host>:<port> form; without it, GRPC_HOST:GRPC_PORT from the environment (localhost:8081 when unset)",
  },
  domain: {
    kind: "string",
    default: "",
    help: "rate limit configuration domain to query",
  },
  descriptors: {
    kind: "string",
    repeatable: true,
    help: "descriptor list to query in <key>=<value>,<key>=<value>,... form; repeat for several descriptors",
  },
  hits_addend: {
    kind: "string",
    default: "0",
    help: "hits to add (0 means 1)",
  },
  negative_hits: {
    kind: "bool",
    help: "give the hits back instead of adding them (is_negative_hits on every descriptor: a refund, as Envoy sends when a stream ends)",
  },
  json: { kind: "bool", help: "print the response as proto3 JSON" },
  explain: {
    kind: "bool",
    help: "call the Explain API instead of ShouldRateLimit (the server needs EXPLAIN_ENABLED=true): match path, rule, counter and decision, charging nothing",
  },
  charge: {
    kind: "bool",
    help: "with -explain: also decide and count the request, as ShouldRateLimit does",
  },
  "explain-bucket": {
    kind: "string",
    default: "",
    help: "explain the RLQS bucket of -domain whose BucketId has these entries, in <key>=<value>,<key>=<value>,... form: its rule, policy, rate L and the current split per stream (the server needs EXPLAIN_ENABLED=true)",
  },
  "set-override": {
    kind: "bool",
    help: "set a run-time override of -domain's one -descriptors (a value ending in * is a prefix wildcard) with -limit, optional -ttl, -reason, -algorithm, -burst; through the admin API on the debug port (-admin_url)",
  },
  "delete-override": {
    kind: "bool",
    help: "delete the run-time override of -domain's one -descriptors (as set), with an optional -reason",
  },
  "list-overrides": {
    kind: "bool",
    help: "list the run-time overrides in force, of -domain or (without it) of every domain",
  },
  "audit-log": {
    kind: "bool",
    help: "print the audit log of override changes, newest first, of -domain or of every domain",
  },
  limit: {
    kind: "string",
    default: "",
    help: "with -set-override: unlimited, <n> (the rule's window), <n>/<unit> (100/minute) or <n>/<k><unit> (300/5minute)",
  },
  algorithm: {
    kind: "string",
    default: "",
    help: "with -set-override: fixed_window, sliding_window or token_bucket (empty: the rule's)",
  },
  burst: {
    kind: "string",
    default: "",
    help: "with -set-override and a token bucket: hits a full bucket admits at once (empty: the limit's requests)",
  },
  ttl: {
    kind: "string",
    default: "",
    help: "with -set-override: how long it applies, a Go duration (90s, 2h); empty: until deleted",
  },
  reason: {
    kind: "string",
    default: "",
    help: "with -set-override or -delete-override: why, recorded in the audit log",
  },
  actor: {
    kind: "string",
    default: "",
    help: "who makes an override change, sent as x-ratelimit-actor (empty: $USER)",
  },
  admin_url: {
    kind: "string",
    default: "",
    help: "the debug port serving the admin API, http://<host>:<port>; without it, DEBUG_HOST:DEBUG_PORT from the environment (http://localhost:6070 when unset). An https://<host>:<port> URL calls the gRPC port over TLS instead (it serves the admin API with ADMIN_ENABLED=true), with -grpc-server-ca-file, and -grpc-cert-file and -grpc-key-file for mutual TLS: the audit log then records the certificate's identity",
  },
  "grpc-use-tls": { kind: "bool", help: "use TLS to connect to the server" },
  "grpc-server-ca-file": {
    kind: "string",
    default: "",
    help: "CA file to verify the server certificate",
  },
  "grpc-cert-file": {
    kind: "string",
    default: "",
    help: "client certificate file (mTLS)",
  },
  "grpc-key-file": {
    kind: "string",
    default: "",
    help: "client key file (mTLS)",
  },
} as const satisfies Record<string, FlagSpec>;

/**
 * Parses one `-descriptors` value: comma-separated `key=value` pairs, each splitting into
 * exactly two parts on `=`.
 *
 * @throws {@link FlagError} `invalid descriptor list` otherwise
 */
export function parseDescriptorFlag(text: string): RateLimitDescriptor_Entry[] {
  return text.split(",").map((pair) => {
    const [key, value, extra] = pair.split("=");
    if (key === undefined || value === undefined || extra !== undefined) {
      throw new FlagError(`invalid descriptor list: "${text}"`);
    }
    return create(RateLimitDescriptor_EntrySchema, { key, value });
  });
}

/**
 * Parses the `-explain-bucket` value: comma-separated `key=value` pairs, as a `BucketId`'s
 * bucket map.
 *
 * @throws {@link FlagError} `invalid -explain-bucket` for a malformed pair or a repeated key
 */
export function parseBucketFlag(text: string): Record<string, string> {
  const bucket: Record<string, string> = {};
  for (const pair of text.split(",")) {
    const [key, value, extra] = pair.split("=");
    if (
      key === undefined ||
      key === "" ||
      value === undefined ||
      extra !== undefined
    )
      throw new FlagError(
        `invalid -explain-bucket: "${text}" (expected <key>=<value>,...)`,
      );
    if (Object.hasOwn(bucket, key))
      throw new FlagError(
        `invalid -explain-bucket: "${text}" names the key "${key}" twice`,
      );
    bucket[key] = value;
  }
  return bucket;
}

/**
 * The window of a descriptor's rule, from the Explain API: ShouldRateLimit's `current_limit`
 * carries only the unit, not `unit_multiplier` nor the algorithm.
 */
export interface RuleWindow {
  /** `unit_multiplier` (1 when not set in the config). */
  readonly unitMultiplier: number;
  /** Window length in seconds (unit × unit_multiplier). */
  readonly windowSeconds: number;
  /** `algorithm: sliding_window`. */
  readonly slidingWindow: boolean;
  /** `algorithm: token_bucket`: the bucket's burst; undefined for window algorithms. */
  readonly tokenBucketBurst?: number | undefined;
  /** `time_zone` of a calendar window; undefined (or "") for windows aligned to the epoch. */
  readonly timeZone?: string | undefined;
  /**
   * The rule has a `rate_limits:` list of this many limits, and the status is the tightest's
   * (this window is that limit's); undefined for a rule with `rate_limit:`.
   */
  readonly listSize?: number | undefined;
}

/**
 * Renders a response for people: one line per descriptor, then the overall code.
 *
 * @param descriptors - the `-descriptors` texts, parallel to `response.statuses`
 * @param windows - the rule window per descriptor, parallel to `response.statuses` (undefined
 * where no rule applies); without it (the server's Explain API is off) a line says the window
 * printed is the unit alone
 */
export function formatResponse(
  response: RateLimitResponse,
  descriptors: readonly string[],
  windows?: readonly (RuleWindow | undefined)[],
): string {
  const lines: string[] = [];
  let windowUnknown = false;
  for (const [i, status] of response.statuses.entries()) {
    const code = RateLimitResponse_Code[status.code];
    const limit = status.currentLimit;
    let detail: string;
    if (limit !== undefined) {
      const unit = RateLimitResponse_RateLimit_Unit[limit.unit];
      const window = windows?.[i];
      if (windows === undefined) windowUnknown = true;
      const multiplier =
        (window !== undefined && window.unitMultiplier > 1
          ? `${window.unitMultiplier} ${unit} (${window.windowSeconds}s window)`
          : unit) +
        (window?.timeZone !== undefined && window.timeZone !== ""
          ? ` in ${window.timeZone}`
          : "");
      const sliding = window?.slidingWindow === true;
      const burst = window?.tokenBucketBurst;
      const name = limit.name !== "" ? ` (${limit.name})` : "";
      const kind =
        (sliding ? ", sliding window" : "") +
        (burst !== undefined ? `, token bucket burst ${burst}` : "") +
        (window?.listSize !== undefined
          ? `, tightest of ${window.listSize} limits`
          : "");
      // A sliding window's duration_until_reset is when its weighted count falls by one, a
      // token bucket's when it is full again (docs/api.md), not the end of a window.
      const reset =
        status.durationUntilReset !== undefined
          ? sliding
            ? `, count falls by one in ${status.durationUntilReset.seconds}s`
            : burst !== undefined
              ? `, full in ${status.durationUntilReset.seconds}s`
              : `, resets in ${status.durationUntilReset.seconds}s`
          : "";
      detail = `limit ${limit.requestsPerUnit} per ${multiplier}${name}${kind}, ${status.limitRemaining} remaining${reset}`;
    } else if (status.limitRemaining === 4294967295) {
      detail = "unlimited";
    } else {
      detail = "no limit applies";
    }
    lines.push(`descriptor ${descriptors[i] ?? String(i)}: ${code}, ${detail}`);
  }
  for (const h of response.responseHeadersToAdd)
    lines.push(`header ${h.key}: ${h.value}`);
  lines.push(`overall: ${RateLimitResponse_Code[response.overallCode]}`);
  if (windowUnknown)
    lines.push(
      "note: window shown as the unit alone; unit_multiplier and sliding windows need the server's Explain API (EXPLAIN_ENABLED=true)",
    );
  return lines.join("\n");
}

/**
 * Returns the `-dial_string` default: `GRPC_HOST:GRPC_PORT` from `env`, as the service reads
 * them, with `localhost` for an unset or wildcard host (`0.0.0.0`, `::`) and `8081` for an
 * unset port; an IPv6 host is bracketed.
 */
export function defaultDialString(
  env: Readonly<Record<string, string | undefined>>,
): string {
  const host = env["GRPC_HOST"] ?? "";
  const port = env["GRPC_PORT"] ?? "";
  const dialHost =
    host === "" || host === "0.0.0.0" || host === "::" || host === "[::]"
      ? "localhost"
      : host.includes(":") && !host.startsWith("[")
        ? `[${host}]`
        : host;
  return `${dialHost}:${port === "" ? "8081" : port}`;
}

/**
 * The window of the limit behind a ShouldRateLimit status, from the Explain answer for its
 * descriptor: the rule's, or for a `rate_limits:` list the limit the status reports (its name,
 * `requests_per_unit` and unit; the rule's first limit when none matches).
 */
export function windowOf(
  d: DescriptorExplanation,
  status: RateLimitResponse_DescriptorStatus | undefined,
): RuleWindow | undefined {
  let rule = d.rule;
  if (rule === undefined) return undefined;
  const list = d.limits.length > 0 ? d.limits.length : undefined;
  const current = status?.currentLimit;
  if (list !== undefined && current !== undefined)
    rule =
      d.limits.find(
        (l) =>
          l.rule?.name === current.name &&
          l.rule.requestsPerUnit === current.requestsPerUnit &&
          l.rule.unit === current.unit,
      )?.rule ?? rule;
  return {
    unitMultiplier: rule.unitMultiplier,
    windowSeconds: rule.windowSeconds,
    slidingWindow: rule.slidingWindow,
    tokenBucketBurst: rule.tokenBucket?.burst,
    timeZone: rule.timeZone,
    listSize: list,
  };
}

/**
 * Runs the client: sends one `ShouldRateLimit` over gRPC and prints the response; with
 * `-explain`, calls `ratelimit.explain.v1.ExplainService/Explain` instead and prints the
 * explanation as a tree (`-json`: proto3 JSON); with `-explain-bucket`, calls `ExplainBucket`
 * for that RLQS bucket of `-domain` and prints its rule, policy, L and split. With
 * `-set-override`, `-delete-override`, `-list-overrides` or `-audit-log` it calls the admin API
 * on the debug port instead (`-admin_url`; see `overrides-client.ts`).
 *
 * Without `-dial_string` it calls `GRPC_HOST:GRPC_PORT` of `env` ({@link defaultDialString}).
 * After a ShouldRateLimit answer it asks the Explain API (charging nothing) for each rule's
 * window, which the answer lacks; when the server does not serve Explain, the answer is
 * printed with the unit alone and a note says so.
 *
 * @param argv - arguments after the program name, Go `flag` syntax; `-version` prints the
 * version, a non-flag argument is refused
 * @param env - the environment for `GRPC_HOST` / `GRPC_PORT`; the command passes `process.env`
 * @returns the exit code: 0 on a response (OK or OVER_LIMIT), 1 on a connection or request error, 2 on bad flags
 */
export async function runClient(
  argv: readonly string[],
  out: (line: string) => void,
  err: (line: string) => void,
  env: Readonly<Record<string, string | undefined>> = {},
): Promise<number> {
  const usage = `usage of ratelimit-client:\n${flagUsage(flags)}`;
  let parsed;
  try {
    parsed = parseGoFlags(argv, flags);
    if (parsed.rest.length > 0)
      throw new FlagError(
        `unexpected argument: ${JSON.stringify(parsed.rest[0])}`,
      );
  } catch (e) {
    err(e instanceof Error ? e.message : String(e));
    err(usage);
    return 2;
  }
  if (parsed.help) {
    out(usage);
    return 0;
  }
  if (parsed.version) {
    out(versionLine("ratelimit-client"));
    return 0;
  }
  const texts = parsed.lists.get("descriptors") ?? [];
  let overrideCommand: OverrideCommand | undefined;
  let overrideEntries: RateLimitDescriptor_Entry[] | undefined;
  try {
    overrideCommand = overrideCommandOf(parsed.values);
    if (overrideCommand !== undefined && texts.length > 1)
      throw new FlagError(
        "an override names one descriptor: give one -descriptors",
      );
    if (overrideCommand !== undefined && texts[0] !== undefined)
      overrideEntries = parseDescriptorFlag(texts[0]);
  } catch (e) {
    err(e instanceof Error ? e.message : String(e));
    return 2;
  }
  const read = (flag: string): Buffer | undefined => {
    const path = parsed.values.get(flag) ?? "";
    return path === "" ? undefined : readFileSync(path);
  };
  if (overrideCommand !== undefined) {
    const value = (flag: string): string => parsed.values.get(flag) ?? "";
    let tls;
    try {
      const ca = read("grpc-server-ca-file");
      const cert = read("grpc-cert-file");
      const key = read("grpc-key-file");
      tls = {
        ...(ca !== undefined ? { ca } : {}),
        ...(cert !== undefined ? { cert } : {}),
        ...(key !== undefined ? { key } : {}),
      };
    } catch (e) {
      err(e instanceof Error ? e.message : String(e));
      return 2;
    }
    const actor = value("actor");
    return runOverrideCommand(
      {
        command: overrideCommand,
        adminUrl: value("admin_url"),
        domain: value("domain"),
        entries: overrideEntries,
        limit: value("limit"),
        algorithm: value("algorithm"),
        burst: value("burst"),
        ttl: value("ttl"),
        reason: value("reason"),
        actor: actor !== "" ? actor : (env["USER"] ?? ""),
        json: value("json") === "true",
        tls,
      },
      out,
      err,
      env,
    );
  }
  let request;
  let bucket: Record<string, string> | undefined;
  try {
    const bucketText = parsed.values.get("explain-bucket") ?? "";
    if (bucketText !== "") bucket = parseBucketFlag(bucketText);
    const hits = Number(parsed.values.get("hits_addend"));
    if (!Number.isInteger(hits) || hits < 0 || hits > 4294967295) {
      throw new FlagError(
        `invalid -hits_addend: ${parsed.values.get("hits_addend") ?? ""}`,
      );
    }
    request = create(RateLimitRequestSchema, {
      domain: parsed.values.get("domain") ?? "",
      hitsAddend: hits,
      descriptors: texts.map((t) => ({
        entries: parseDescriptorFlag(t),
        isNegativeHits: parsed.values.get("negative_hits") === "true",
      })),
    });
  } catch (e) {
    err(e instanceof Error ? e.message : String(e));
    return 2;
  }
  const useTls = parsed.values.get("grpc-use-tls") === "true";
  const dialFlag = parsed.values.get("dial_string") ?? "";
  const dialString = dialFlag !== "" ? dialFlag : defaultDialString(env);
  const ca = read("grpc-server-ca-file");
  const cert = read("grpc-cert-file");
  const key = read("grpc-key-file");
  const transport = createGrpcTransport({
    baseUrl: `${useTls ? "https" : "http"}://${dialString}`,
    nodeOptions: {
      ...(ca !== undefined ? { ca } : {}),
      ...(cert !== undefined ? { cert } : {}),
      ...(key !== undefined ? { key } : {}),
    },
  });
  const json = parsed.values.get("json") === "true";
  if (bucket !== undefined) {
    try {
      const response = await createClient(
        ExplainService,
        transport,
      ).explainBucket(
        { domain: request.domain, bucket },
        { timeoutMs: 10_000 },
      );
      out(
        json
          ? toJsonString(ExplainBucketResponseSchema, response)
          : formatBucketExplanation(response),
      );
      return 0;
    } catch (e) {
      err(`request error: ${e instanceof Error ? e.message : String(e)}`);
      return 1;
    }
  }
  if (parsed.values.get("explain") === "true") {
    try {
      const response = await createClient(ExplainService, transport).explain(
        { request, charge: parsed.values.get("charge") === "true" },
        { timeoutMs: 10_000 },
      );
      out(
        json
          ? toJsonString(ExplainResponseSchema, response)
          : formatExplanation(response, request),
      );
      return 0;
    } catch (e) {
      err(`request error: ${e instanceof Error ? e.message : String(e)}`);
      return 1;
    }
  }
  const client = createClient(RateLimitService, transport);
  let response: RateLimitResponse;
  try {
    response = await client.shouldRateLimit(request, {
      timeoutMs: 10_000,
    });
  } catch (e) {
    err(`request error: ${e instanceof Error ? e.message : String(e)}`);
    return 1;
  }
  if (json) {
    out(toJsonString(RateLimitResponseSchema, response));
    return 0;
  }
  let windows: (RuleWindow | undefined)[] | undefined;
  try {
    const explained = await createClient(ExplainService, transport).explain(
      { request, charge: false },
      { timeoutMs: 10_000 },
    );
    windows = explained.descriptors.map((d, i) =>
      windowOf(d, response.statuses[i]),
    );
  } catch (e) {
    // Explain off (UNIMPLEMENTED) or unreachable: print the answer without the windows.
    if (!(e instanceof ConnectError) || e.code !== Code.Unimplemented)
      err(
        `warning: rule windows not read: ${e instanceof Error ? e.message : String(e)}`,
      );
  }
  out(`domain: ${request.domain}\n${formatResponse(response, texts, windows)}`);
  return 0;
}

if (isMain(import.meta.url)) {
  const code = await runClient(
    process.argv.slice(2),
    (line) => process.stdout.write(line + "\n"),
    (line) => process.stderr.write(line + "\n"),
    process.env,
  );
  process.exit(code);
}
