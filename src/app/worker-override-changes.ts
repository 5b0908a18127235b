import type { AuditEntry } from "../overrides/override-message.js";
import {
  overrideFromJson,
  overrideToJson,
} from "../overrides/override-message.js";
import type { AuditEntryJson } from "./worker-messages.js";

/** An audit entry in the form it crosses the workers' IPC channel. */
export function auditEntryToJson(entry: AuditEntry): AuditEntryJson {
  return {
    timeMs: entry.timeMs,
    domain: entry.domain,
    actor: entry.actor,
    action: entry.action,
    reason: entry.reason,
    ...(entry.before !== undefined
      ? { before: overrideToJson(entry.before) }
      : {}),
    ...(entry.after !== undefined
      ? { after: overrideToJson(entry.after) }
      : {}),
  };
}

/**
 * The audit entry of its IPC form.
 *
 * @throws the JSON parser's error or {@link RangeError} when a record in it does not parse
 */
export function auditEntryFromJson(json: AuditEntryJson): AuditEntry {
  return {
    timeMs: json.timeMs,
    domain: json.domain,
    actor: json.actor,
    action: json.action,
    reason: json.reason,
    before:
      json.before === undefined ? undefined : overrideFromJson(json.before),
    after: json.after === undefined ? undefined : overrideFromJson(json.after),
  };
}
