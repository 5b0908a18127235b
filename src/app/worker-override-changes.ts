// The override changes and audit entries of WORKERS > 1 as they cross the IPC channel
// (worker-messages.ts), and the one way the primary and the workers apply a change.

import type { AuditEntry } from "../overrides/override-message.js";
import {
  overrideFromJson,
  overrideToJson,
} from "../overrides/override-message.js";
import type { MemoryOverrideStore } from "../overrides/override-store.js";
import type { OverrideRecord } from "../overrides/override-table.js";
import type { AuditEntryJson, OverrideChange } from "./worker-messages.js";

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

/**
 * Applies an override change to a memory store, as every process of the group does in the
 * primary's order.
 *
 * @returns the override the change replaced or deleted
 * @throws the store's error (a limit that does not compile) or the parser's
 */
export function applyOverrideChange(
  store: MemoryOverrideStore,
  change: OverrideChange,
): Promise<OverrideRecord | undefined> {
  return change.op === "set"
    ? store.set(overrideFromJson(change.record))
    : store.delete(
        change.domain,
        change.entries,
        change.actor,
        change.reason,
        change.timeMs,
      );
}
