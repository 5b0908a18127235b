// `ratelimit-client -set-override / -delete-override / -list-overrides / -audit-log`: the
// overrides part of the admin API (docs/operations.md#overrides), called as Connect unary JSON
// on the debug port (where the service always serves it), printed one line per override or
// audit record (`-json`: the answer's proto3 JSON).

import {
  create,
  toJsonString,
  type MessageInitShape,
} from "@bufbuild/protobuf";
import { timestampMs } from "@bufbuild/protobuf/wkt";
import { createClient } from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
} from "@connectrpc/connect-node";
import {
  AdminService,
  DeleteOverrideResponseSchema,
  GetAuditLogResponseSchema,
  ListOverridesResponseSchema,
  OverrideLimitSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
  type SetOverrideRequestSchema,
  SetOverrideResponseSchema,
  type AuditRecord,
  type Override,
  type OverrideLimit,
} from "../proto.js";
import { formatGoDuration, parseGoDuration } from "../util/go-duration.js";
import { FlagError } from "./go-flags.js";

/** One of the four override calls. */
export type OverrideCommand = "set" | "delete" | "list" | "audit";

const commandFlags: Readonly<Record<string, OverrideCommand>> = {
  "set-override": "set",
  "delete-override": "delete",
  "list-overrides": "list",
  "audit-log": "audit",
};

/**
 * The override call the flags ask for, or `undefined` when none does.
 *
 * @throws {@link FlagError} when more than one is given
 */
export function overrideCommandOf(
  values: ReadonlyMap<string, string>,
): OverrideCommand | undefined {
  const given = Object.keys(commandFlags).filter(
    (flag) => values.get(flag) === "true",
  );
  if (given.length > 1)
    throw new FlagError(
      `only one of ${given.map((f) => `-${f}`).join(", ")} at a time`,
    );
  const flag = given[0];
  return flag === undefined ? undefined : commandFlags[flag];
}

const unitNames: Readonly<Record<string, Unit>> = {
  second: Unit.SECOND,
  minute: Unit.MINUTE,
  hour: Unit.HOUR,
  day: Unit.DAY,
  week: Unit.WEEK,
  month: Unit.MONTH,
  year: Unit.YEAR,
};

/**
 * Parses the `-limit` value: `unlimited`; `<n>` (the rule's window, `n` requests); `<n>/<unit>`
 * (`100/minute`); or `<n>/<k><unit>` (`300/5minute`: `unit_multiplier` 5). Units are
 * second … year, any case, with an optional plural `s`.
 *
 * @throws {@link FlagError} `invalid -limit` otherwise
 */
export function parseLimitFlag(
  text: string,
): MessageInitShape<typeof OverrideLimitSchema> {
  if (text.toLowerCase() === "unlimited") return { unlimited: true };
  const match = /^(\d+)(?:\/(\d*)([a-z]+?)s?)?$/i.exec(text);
  const unit =
    match?.[3] === undefined ? undefined : unitNames[match[3].toLowerCase()];
  const requests = Number(match?.[1]);
  const multiplier =
    match?.[2] === undefined || match[2] === "" ? 0 : Number(match[2]);
  if (
    match === null ||
    (match[3] !== undefined && unit === undefined) ||
    requests > 4294967295 ||
    multiplier > 4294967295
  )
    throw new FlagError(
      `invalid -limit: "${text}" (expected unlimited, <n>, <n>/<unit> or <n>/<k><unit>, e.g. 100/minute or 300/5minute)`,
    );
  return {
    requestsPerUnit: requests,
    ...(unit !== undefined ? { unit } : {}),
    ...(multiplier > 0 ? { unitMultiplier: multiplier } : {}),
  };
}

/**
 * Returns the `-admin_url` default: the debug port of `env` (`DEBUG_HOST:DEBUG_PORT`, as the
 * service reads them), `localhost` for an unset or wildcard host and `6070` for an unset port.
 */
export function defaultAdminUrl(
  env: Readonly<Record<string, string | undefined>>,
): string {
  const host = env["DEBUG_HOST"] ?? "";
  const port = env["DEBUG_PORT"] ?? "";
  const dialHost =
    host === "" || host === "0.0.0.0" || host === "::" || host === "[::]"
      ? "localhost"
      : host.includes(":") && !host.startsWith("[")
        ? `[${host}]`
        : host;
  return `http://${dialHost}:${port === "" ? "6070" : port}`;
}

/** `100 per MINUTE`, `300 per 5 MINUTE (token_bucket, burst 50)`, `unlimited`. */
export function formatOverrideLimit(limit: OverrideLimit | undefined): string {
  if (limit === undefined) return "none";
  if (limit.unlimited) return "unlimited";
  const unit = Unit[limit.unit];
  const window =
    limit.unitMultiplier > 1 ? `${String(limit.unitMultiplier)} ${unit}` : unit;
  const details = [
    limit.algorithm !== "" && limit.algorithm !== "fixed_window"
      ? limit.algorithm
      : "",
    limit.algorithm === "token_bucket" ? `burst ${String(limit.burst)}` : "",
    limit.timeZone !== "" ? `in ${limit.timeZone}` : "",
    limit.shadowMode ? "shadow mode" : "",
  ].filter((d) => d !== "");
  return `${String(limit.requestsPerUnit)} per ${window}${details.length > 0 ? ` (${details.join(", ")})` : ""}`;
}

function descriptorOf(override: Override): string {
  return override.entries.map((e) => `${e.key}=${e.value}`).join(",");
}

/**
 * One line per override: domain, descriptor, limit, expiry (with the time left at `nowMs`),
 * who set it, the reason and the rule it overrides.
 */
export function formatOverride(override: Override, nowMs: number): string {
  const expiry =
    override.expireTime === undefined
      ? "no expiry"
      : `expires ${new Date(timestampMs(override.expireTime)).toISOString()} (in ${formatGoDuration(BigInt(Math.max(0, Math.round((timestampMs(override.expireTime) - nowMs) / 1000))) * 1_000_000_000n)})`;
  const rule =
    override.rule === "" ? "no rule matches it now" : `rule ${override.rule}`;
  const reason =
    override.reason === "" ? "" : `, reason ${JSON.stringify(override.reason)}`;
  return `${override.domain} ${descriptorOf(override)}: ${formatOverrideLimit(override.limit)}, ${expiry}, set by ${override.actor}${reason}; ${rule}`;
}

/** One line per audit record: time, action, actor, descriptor, before → after, reason. */
export function formatAuditRecord(record: AuditRecord): string {
  const time =
    record.time === undefined
      ? "?"
      : new Date(timestampMs(record.time)).toISOString();
  const subject = record.after ?? record.before;
  const descriptor = subject === undefined ? "" : descriptorOf(subject);
  const reason =
    record.reason === "" ? "" : ` ${JSON.stringify(record.reason)}`;
  return `${time} ${record.action.padEnd(6)} ${record.actor} ${record.domain} ${descriptor}: ${formatOverrideLimit(record.before?.limit)} -> ${formatOverrideLimit(record.after?.limit)}${reason}`;
}

/** What {@link runOverrideCommand} reads from the parsed flags. */
export interface OverrideCommandInput {
  readonly command: OverrideCommand;
  /** `-admin_url`; "" for {@link defaultAdminUrl}. */
  readonly adminUrl: string;
  readonly domain: string;
  /** The `-descriptors` entries of the override (set and delete: exactly one descriptor). */
  readonly entries:
    readonly { readonly key: string; readonly value: string }[] | undefined;
  readonly limit: string;
  readonly algorithm: string;
  readonly burst: string;
  /** Go duration; "" for none. */
  readonly ttl: string;
  readonly reason: string;
  /** Sent as `x-ratelimit-actor`; "" sends none. */
  readonly actor: string;
  readonly json: boolean;
  /**
   * With an `https://` `adminUrl` (the gRPC port over TLS): the CA that signed the server's
   * certificate, and the client certificate and key for mutual TLS (PEM). @defaultValue none
   */
  readonly tls?: {
    readonly ca?: Buffer;
    readonly cert?: Buffer;
    readonly key?: Buffer;
  };
}

/**
 * Runs one override call against the admin API on the debug port and prints the answer.
 *
 * @returns the exit code: 0 on an answer, 1 on a refused call or a connection error, 2 on bad
 *   flags
 */
export async function runOverrideCommand(
  input: OverrideCommandInput,
  out: (line: string) => void,
  err: (line: string) => void,
  env: Readonly<Record<string, string | undefined>>,
  nowMs: () => number = Date.now,
): Promise<number> {
  const { command } = input;
  let setRequest;
  try {
    if (
      (command === "set" || command === "delete") &&
      input.entries === undefined
    )
      throw new FlagError(
        `-${command}-override needs -domain and one -descriptors <key>=<value>,...`,
      );
    if (command === "set") setRequest = buildSetRequest(input);
  } catch (e) {
    err(e instanceof Error ? e.message : String(e));
    return 2;
  }
  const entries =
    input.entries?.map((e) => ({ key: e.key, value: e.value })) ?? [];
  const baseUrl = input.adminUrl !== "" ? input.adminUrl : defaultAdminUrl(env);
  // The debug port: Connect JSON over HTTP/1.1. An https:// URL: gRPC over TLS to the gRPC
  // port (ADMIN_ENABLED=true), where a client certificate names the actor in the audit log.
  const client = createClient(
    AdminService,
    baseUrl.startsWith("https://")
      ? createGrpcTransport({
          baseUrl,
          nodeOptions: {
            ...(input.tls?.ca !== undefined ? { ca: input.tls.ca } : {}),
            ...(input.tls?.cert !== undefined ? { cert: input.tls.cert } : {}),
            ...(input.tls?.key !== undefined ? { key: input.tls.key } : {}),
          },
        })
      : createConnectTransport({ baseUrl, httpVersion: "1.1" }),
  );
  const options = {
    timeoutMs: 10_000,
    ...(input.actor !== ""
      ? { headers: { "x-ratelimit-actor": input.actor } }
      : {}),
  };
  try {
    switch (command) {
      case "set": {
        const answer = await client.setOverride(setRequest ?? {}, options);
        out(
          input.json
            ? toJsonString(SetOverrideResponseSchema, answer)
            : answer.override === undefined
              ? "override set"
              : `override set: ${formatOverride(answer.override, nowMs())}`,
        );
        return 0;
      }
      case "delete": {
        const answer = await client.deleteOverride(
          { domain: input.domain, entries, reason: input.reason },
          options,
        );
        out(
          input.json
            ? toJsonString(DeleteOverrideResponseSchema, answer)
            : answer.override === undefined
              ? "override deleted"
              : `override deleted: ${formatOverride(answer.override, nowMs())}`,
        );
        return 0;
      }
      case "list": {
        const answer = await client.listOverrides(
          { domain: input.domain },
          options,
        );
        if (input.json) out(toJsonString(ListOverridesResponseSchema, answer));
        else if (answer.overrides.length === 0) out("no overrides in force");
        else
          for (const override of answer.overrides)
            out(formatOverride(override, nowMs()));
        return 0;
      }
      case "audit": {
        const answer = await client.getAuditLog(
          { domain: input.domain },
          options,
        );
        if (input.json) out(toJsonString(GetAuditLogResponseSchema, answer));
        else if (answer.records.length === 0) out("no audit records");
        else
          for (const record of answer.records) out(formatAuditRecord(record));
        return 0;
      }
    }
  } catch (e) {
    err(`request error: ${e instanceof Error ? e.message : String(e)}`);
    return 1;
  }
}

/**
 * The SetOverride request of the flags.
 *
 * @throws {@link FlagError} for a missing or invalid `-limit`, `-burst` or `-ttl`
 */
function buildSetRequest(
  input: OverrideCommandInput,
): MessageInitShape<typeof SetOverrideRequestSchema> {
  const entries =
    input.entries?.map((e) => ({ key: e.key, value: e.value })) ?? [];
  if (input.limit === "")
    throw new FlagError(
      "-set-override needs -limit (unlimited, <n>, <n>/<unit> or <n>/<k><unit>)",
    );
  const limit = create(OverrideLimitSchema, parseLimitFlag(input.limit));
  if (input.algorithm !== "") limit.algorithm = input.algorithm;
  if (input.burst !== "") {
    const burst = Number(input.burst);
    if (!Number.isInteger(burst) || burst < 1 || burst > 4294967295)
      throw new FlagError(`invalid -burst: ${input.burst}`);
    limit.burst = burst;
  }
  let ttl: { seconds: bigint; nanos: number } | undefined;
  if (input.ttl !== "") {
    const nanoseconds = parseGoDuration(input.ttl);
    if (nanoseconds === undefined || nanoseconds < 0n)
      throw new FlagError(
        `invalid -ttl: "${input.ttl}" (a Go duration such as 90s or 2h)`,
      );
    ttl = {
      seconds: nanoseconds / 1_000_000_000n,
      nanos: Number(nanoseconds % 1_000_000_000n),
    };
  }
  return {
    domain: input.domain,
    entries,
    limit,
    ...(ttl !== undefined ? { ttl } : {}),
    reason: input.reason,
  };
}
