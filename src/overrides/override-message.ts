// Conversions between the table's records and the admin API's messages (`Override`,
// `AuditRecord`), which are also the stored form: the kv store keeps each override and each
// audit record as its message's proto3 JSON, so what an operator reads in the store is what
// the API answers.

import { create, fromJsonString, toJsonString } from "@bufbuild/protobuf";
import { timestampFromMs, timestampMs } from "@bufbuild/protobuf/wkt";
import {
  AdminEntrySchema,
  AuditRecordSchema,
  OverrideSchema,
  type AuditRecord,
  type Override,
} from "../proto.js";
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
    throw new RangeError("stored override lacks its domain, entries or limit");
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
 * Parses the stored form of an override.
 *
 * @throws {@link RangeError} or the JSON parser's error for a value that is not one
 */
export function overrideFromJson(json: string): OverrideRecord {
  return fromOverrideMessage(
    fromJsonString(OverrideSchema, json, { ignoreUnknownFields: true }),
  );
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
