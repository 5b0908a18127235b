// Conversions between the table's records and the admin API's messages (`Override`,
// `AuditRecord`), which are also the stored form: the kv store keeps each override and each
// audit record as its message's proto3 JSON, so what an operator reads in the store is what
// the API answers.

import { create, fromJsonString, toJsonString } from "@bufbuild/protobuf";
import { timestampFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import {
  AdminEntrySchema,
  AuditRecordSchema,
  OverrideLimitSchema,
  OverrideSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
  type AuditRecord,
  type Override,
  type OverrideLimit,
} from "../proto.js";
import { unitByName } from "../config/units.js";
import type { OverrideEntry } from "./override-key.js";
import type { OverrideRecord } from "./override-table.js";

/** What changed an override: set (create or replace), delete, or its expiry. */
export type AuditAction = "set" | "delete" | "expire";

/** One change of an override, as the audit log keeps it. */
export interface AuditEntry {
  /** ms since the epoch. */
  readonly timeMs: number;
  readonly domain: string;
  readonly actor: string;
  readonly action: AuditAction;
  readonly reason: string;
  /** The override before the change; `undefined` when there was none. */
  readonly before: OverrideRecord | undefined;
  /** The override after the change; `undefined` when deleted or expired. */
  readonly after: OverrideRecord | undefined;
}

/**
 * The `Override` message of a record.
 *
 * @param rule - the stats key of the rule it overrides now; "" when none matches
 */
export function toOverrideMessage(record: OverrideRecord, rule = ""): Override {
  return create(OverrideSchema, {
    domain: record.domain,
    entries: record.entries.map((e) =>
      create(AdminEntrySchema, { key: e.key, value: e.value }),
    ),
    limit: record.limit,
    ...(record.expireMs !== undefined
      ? { expireTime: timestampFromMs(record.expireMs) }
      : {}),
    reason: record.reason,
    actor: record.actor,
    updateTime: timestampFromMs(record.updateMs),
    rule,
  });
}

/**
 * The record of an `Override` message (its `rule` is dropped: it is computed when answered).
 *
 * @throws {@link RangeError} when the message has no domain, entries or limit
 */
export function fromOverrideMessage(message: Override): OverrideRecord {
  const limit = message.limit;
  if (message.domain === "" || message.entries.length === 0 || !limit)
    throw new RangeError(incomplete);
  return {
    domain: message.domain,
    entries: message.entries.map((e) => ({ key: e.key, value: e.value })),
    limit,
    expireMs:
      message.expireTime === undefined
        ? undefined
        : timestampMs(message.expireTime),
    reason: message.reason,
    actor: message.actor,
    updateMs:
      message.updateTime === undefined ? 0 : timestampMs(message.updateTime),
  };
}

/** The stored form of an override: its message's proto3 JSON (without `rule`). */
export function overrideToJson(record: OverrideRecord): string {
  return toJsonString(OverrideSchema, toOverrideMessage(record));
}

/**
 * Parses the stored form of an override. The JSON this service writes (the keys and value
 * types `overrideToJson` emits) is read by a direct walk of `JSON.parse`'s result, about ten
 * times cheaper than the message parser (a start reads a million of them); anything else
 * (another spelling proto3 JSON allows, an unknown key, a value of another type) goes through
 * the message parser, so the result is the same for every input.
 *
 * @throws {@link RangeError} or the JSON parser's error for a value that is not one
 */
export function overrideFromJson(json: string): OverrideRecord {
  return (
    ownOverrideJson(json) ??
    fromOverrideMessage(
      fromJsonString(OverrideSchema, json, { ignoreUnknownFields: true }),
    )
  );
}

const incomplete = "stored override lacks its domain, entries or limit";

/**
 * The `Unit` enum's proto names (what proto3 JSON writes) to their values; a name missing
 * here only sends its value through the message parser.
 */
const unitNumbers: ReadonlyMap<string, Unit> = new Map([
  ["UNKNOWN", Unit.UNKNOWN],
  ...unitByName,
]);

/** The range proto3 JSON allows a `Timestamp`, ms (0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z). */
const timestampMsMin = -62135596800000;
const timestampMsMax = 253402300799000;

/** RFC 3339 as protobuf-es reads a `Timestamp` (from-json.js `timestampFromJson`). */
const rfc3339 =
  /^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?(?:Z|([+-][0-9][0-9]:[0-9][0-9]))$/;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** `String.prototype.isWellFormed` (ES2024, Node ≥ 20), which lib ES2023 does not declare. */
interface WellFormed {
  isWellFormed(): boolean;
}

/** A JSON `\u` escape of a UTF-16 surrogate. */
const surrogateEscape = /\\u[dD][89abcdefABCDEF]/;

/** The last timestamp text read and its value (a bulk load repeats one update time). */
let lastTimestamp = { text: "", ms: 0 };

/**
 * A `Timestamp`'s proto3 JSON as ms since the epoch, exactly as protobuf-es's parser and
 * `timestampMs` compute it; `undefined` for a string that parser refuses (and for the few
 * near the top of the range that are left to it).
 */
function timestampJsonMs(text: string): number | undefined {
  if (text === lastTimestamp.text) return lastTimestamp.ms;
  const m = rfc3339.exec(text);
  if (m === null) return undefined;
  const fraction = m[7];
  let ms: number;
  if (m[8] === undefined && (fraction === undefined || fraction.length === 3)) {
    // What `toJson` writes (UTC, whole ms): the text itself is the ISO form Date.parse
    // reads, fraction included, and its ms are exact. Past the whole-second maximum only
    // with a fraction: left to the message parser, which allows that.
    ms = Date.parse(text);
    if (Number.isNaN(ms) || ms < timestampMsMin || ms > timestampMsMax)
      return undefined;
  } else {
    const whole = Date.parse(
      `${m[1] ?? ""}-${m[2] ?? ""}-${m[3] ?? ""}T${m[4] ?? ""}:${m[5] ?? ""}:${m[6] ?? ""}${m[8] ?? "Z"}`,
    );
    if (Number.isNaN(whole) || whole < timestampMsMin || whole > timestampMsMax)
      return undefined;
    // protobuf-es keeps nanos; timestampMs rounds them to ms.
    const nanos =
      fraction === undefined
        ? 0
        : parseInt("1" + fraction + "0".repeat(9 - fraction.length)) - 1e9;
    ms = whole + Math.round(nanos / 1e6);
  }
  lastTimestamp = { text, ms };
  return ms;
}

/** A uint32 as proto3 JSON writes it (a number), or `undefined`. */
function uint32(value: unknown): number | undefined {
  return typeof value === "number" &&
    Number.isInteger(value) &&
    value >= 0 &&
    value <= 0xffffffff
    ? value >>> 0
    : undefined;
}

/** The `OverrideLimit` of its proto3 JSON as this service writes it, or `undefined`. */
function ownLimitJson(
  json: Record<string, unknown>,
): OverrideLimit | undefined {
  const limit = create(OverrideLimitSchema);
  for (const key of Object.keys(json)) {
    const value = json[key];
    switch (key) {
      case "requestsPerUnit":
      case "unitMultiplier":
      case "burst": {
        const n = uint32(value);
        if (n === undefined) return undefined;
        limit[key] = n;
        break;
      }
      case "unit": {
        const n =
          typeof value === "string" ? unitNumbers.get(value) : undefined;
        if (n === undefined) return undefined;
        limit.unit = n;
        break;
      }
      case "unlimited":
      case "shadowMode":
        if (typeof value !== "boolean") return undefined;
        limit[key] = value;
        break;
      case "algorithm":
      case "timeZone":
      case "weekStart":
        if (typeof value !== "string") return undefined;
        limit[key] = value;
        break;
      default:
        return undefined;
    }
  }
  return limit;
}

/** The entries of an `Override`'s proto3 JSON as this service writes it, or `undefined`. */
function ownEntriesJson(json: unknown[]): OverrideEntry[] | undefined {
  const entries: OverrideEntry[] = [];
  for (const item of json) {
    if (!isObject(item)) return undefined;
    let key = "";
    let value = "";
    for (const name of Object.keys(item)) {
      const text = item[name];
      if (typeof text !== "string") return undefined;
      if (name === "key") key = text;
      else if (name === "value") value = text;
      else return undefined;
    }
    entries.push({ key, value });
  }
  return entries;
}

/**
 * The record of an `Override`'s proto3 JSON when it has the shape this service writes (keys
 * as `toJson` names them, values of their JSON types); `undefined` for anything else, which
 * the message parser then reads (or refuses). Equal to what that parser and
 * {@link fromOverrideMessage} make of the same text. The fast path of
 * {@link overrideFromJson}, exported for its test.
 *
 * @throws {@link RangeError} when the value lacks its domain, entries or limit
 */
export function ownOverrideJson(json: string): OverrideRecord | undefined {
  // The message parser refuses a string field that is not well-formed UTF-16 (a lone
  // surrogate, raw or escaped): such a text is left to it.
  if (
    !(json as unknown as WellFormed).isWellFormed() ||
    (json.includes("\\u") && surrogateEscape.test(json))
  )
    return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(json);
  } catch {
    return undefined;
  }
  if (!isObject(parsed)) return undefined;
  let domain = "";
  let reason = "";
  let actor = "";
  let entries: OverrideEntry[] = [];
  let limit: OverrideLimit | undefined;
  let expireMs: number | undefined;
  let updateMs = 0;
  for (const key of Object.keys(parsed)) {
    const value = parsed[key];
    switch (key) {
      case "domain":
      case "reason":
      case "actor":
      case "rule":
        if (typeof value !== "string") return undefined;
        if (key === "domain") domain = value;
        else if (key === "reason") reason = value;
        else if (key === "actor") actor = value;
        break;
      case "entries": {
        const read = Array.isArray(value) ? ownEntriesJson(value) : undefined;
        if (read === undefined) return undefined;
        entries = read;
        break;
      }
      case "limit":
        limit = isObject(value) ? ownLimitJson(value) : undefined;
        if (limit === undefined) return undefined;
        break;
      case "expireTime":
      case "updateTime": {
        const ms =
          typeof value === "string" ? timestampJsonMs(value) : undefined;
        if (ms === undefined) return undefined;
        if (key === "expireTime") expireMs = ms;
        else updateMs = ms;
        break;
      }
      default:
        return undefined;
    }
  }
  if (domain === "" || entries.length === 0 || limit === undefined)
    throw new RangeError(incomplete);
  return { domain, entries, limit, expireMs, reason, actor, updateMs };
}

/** The `AuditRecord` message of an audit entry. */
export function toAuditMessage(entry: AuditEntry): AuditRecord {
  return create(AuditRecordSchema, {
    time: timestampFromMs(entry.timeMs),
    actor: entry.actor,
    action: entry.action,
    reason: entry.reason,
    domain: entry.domain,
    ...(entry.before !== undefined
      ? { before: toOverrideMessage(entry.before) }
      : {}),
    ...(entry.after !== undefined
      ? { after: toOverrideMessage(entry.after) }
      : {}),
  });
}

/** The stored form of an audit entry: its message's proto3 JSON. */
export function auditToJson(entry: AuditEntry): string {
  return toJsonString(AuditRecordSchema, toAuditMessage(entry));
}

/**
 * Parses the stored form of an audit entry (as a message: it is only ever answered).
 *
 * @throws the JSON parser's error for a value that is not one
 */
export function auditFromJson(json: string): AuditRecord {
  return fromJsonString(AuditRecordSchema, json, { ignoreUnknownFields: true });
}
