// Where run-time overrides and their audit log live. Every store keeps an {@link OverrideTable}
// in process for the hot path; the memory store (BACKEND_TYPE memory or mc) holds nothing else,
// so each replica has its own overrides and audit log, while the kv store
// (kv-override-store.ts) keeps them in the kv instance and mirrors them into the table of
// every replica.

import type { Logger } from "pino";
import type { AuditRecord } from "../proto.js";
import type { Clock } from "../util/clock.js";
import { toAuditMessage, type AuditEntry } from "./override-message.js";
import type { OverrideEntry } from "./override-key.js";
import type { OverrideRecord, OverrideTable } from "./override-table.js";

/** Actor of the audit records of expiries. */
export const expiryActor = "ratelimit";

/** A store of overrides with its audit log (see the file header). */
export interface OverrideStore {
  /** Where overrides are kept: `memory` (this process) or `kv` (shared by the replicas). */
  readonly kind: "memory" | "kv";
  /** The table ShouldRateLimit probes, kept up to date by the store. */
  readonly table: OverrideTable;
  /**
   * Sets (creates or replaces) an override and appends a `set` record (actor and reason of
   * `record`) to the audit log; the table holds it once this resolves.
   *
   * @returns the override replaced, or `undefined`
   * @throws {@link OverrideLimitError} when the limit does not compile (nothing changed)
   * @throws {@link BackendError} when the store fails (UNAVAILABLE)
   */
  set(record: OverrideRecord): Promise<OverrideRecord | undefined>;
  /**
   * Deletes the override of a descriptor (entries exactly as set) and appends a `delete`
   * record. An override already expired is not deleted but expired (its `expire` record).
   *
   * @returns the override deleted, or `undefined` when none was in force
   * @throws {@link BackendError} when the store fails
   */
  delete(
    domain: string,
    entries: readonly OverrideEntry[],
    actor: string,
    reason: string,
  ): Promise<OverrideRecord | undefined>;
  /**
   * The audit log, newest first: of one domain or (with `undefined`) of all, at most `limit`
   * records.
   *
   * @throws {@link BackendError} when the store fails
   */
  auditLog(domain: string | undefined, limit: number): Promise<AuditRecord[]>;
  /** Loads the overrides and starts the expiry sweep (and, for kv, the sync); never throws. */
  start(): Promise<void>;
  /** Stops timers and connections (idempotent). */
  close(): Promise<void>;
}

/** Options of {@link MemoryOverrideStore}. */
export interface MemoryOverrideStoreOptions {
  readonly table: OverrideTable;
  readonly clock: Clock;
  readonly logger: Logger;
  /** `ADMIN_AUDIT_LOG_MAX`: audit records kept (the oldest are dropped), ≥ 1. */
  readonly auditLogMax: number;
  /**
   * How often expired overrides are removed and their `expire` records written, ms (they stop
   * applying at their expiry whatever this is). @defaultValue 1000
   */
  readonly sweepIntervalMs?: number;
}

/**
 * The overrides of one process (memory and mc backends): the table itself, and the audit log
 * in a bounded array.
 */
export class MemoryOverrideStore implements OverrideStore {
  readonly kind = "memory";
  readonly table: OverrideTable;
  private readonly clock: Clock;
  private readonly logger: Logger;
  private readonly auditLogMax: number;
  private readonly sweepIntervalMs: number;
  /** Oldest first; trimmed to `auditLogMax` when it holds twice as many. */
  private audit: AuditEntry[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(options: MemoryOverrideStoreOptions) {
    if (!Number.isInteger(options.auditLogMax) || options.auditLogMax < 1)
      throw new RangeError(
        `auditLogMax must be an integer >= 1, got ${String(options.auditLogMax)}`,
      );
    this.table = options.table;
    this.clock = options.clock;
    this.logger = options.logger;
    this.auditLogMax = options.auditLogMax;
    this.sweepIntervalMs = options.sweepIntervalMs ?? 1000;
  }

  set(record: OverrideRecord): Promise<OverrideRecord | undefined> {
    const before = this.table.put(record);
    this.append({
      timeMs: record.updateMs,
      domain: record.domain,
      actor: record.actor,
      action: "set",
      reason: record.reason,
      before,
      after: record,
    });
    return Promise.resolve(before);
  }

  /**
   * As {@link OverrideStore.delete}; `timeMs` (ms since the epoch, default now) is the audit
   * record's time, so that processes replaying one change (WORKERS > 1) record one time.
   */
  delete(
    domain: string,
    entries: readonly OverrideEntry[],
    actor: string,
    reason: string,
    timeMs?: number,
  ): Promise<OverrideRecord | undefined> {
    this.sweep();
    const before = this.table.remove(domain, entries);
    if (before !== undefined)
      this.append({
        timeMs: timeMs ?? this.clock.nowMs(),
        domain,
        actor,
        action: "delete",
        reason,
        before,
        after: undefined,
      });
    return Promise.resolve(before);
  }

  auditLog(domain: string | undefined, limit: number): Promise<AuditRecord[]> {
    const out: AuditRecord[] = [];
    const oldest = Math.max(0, this.audit.length - this.auditLogMax);
    for (
      let i = this.audit.length - 1;
      i >= oldest && out.length < limit;
      i--
    ) {
      const entry = this.audit[i];
      if (
        entry !== undefined &&
        (domain === undefined || entry.domain === domain)
      )
        out.push(toAuditMessage(entry));
    }
    return Promise.resolve(out);
  }

  start(): Promise<void> {
    this.timer ??= setInterval(() => {
      this.sweep();
    }, this.sweepIntervalMs);
    this.timer.unref();
    return Promise.resolve();
  }

  close(): Promise<void> {
    clearInterval(this.timer);
    return Promise.resolve();
  }

  /**
   * The overrides in force and the audit log (oldest first, at most `ADMIN_AUDIT_LOG_MAX`), to
   * hand to another process ({@link importState}).
   */
  exportState(): {
    overrides: OverrideRecord[];
    audit: AuditEntry[];
  } {
    this.sweep();
    return {
      overrides: this.table.list(undefined, this.clock.nowMs()),
      audit: this.audit.slice(-this.auditLogMax),
    };
  }

  /**
   * Replaces the overrides and the audit log with another process's ({@link exportState});
   * an override whose limit no longer compiles is skipped.
   *
   * @returns the overrides skipped, with why
   */
  importState(state: {
    readonly overrides: readonly OverrideRecord[];
    readonly audit: readonly AuditEntry[];
  }): { record: OverrideRecord; error: unknown }[] {
    const skipped: { record: OverrideRecord; error: unknown }[] = [];
    for (const record of this.table.list(undefined, Number.NEGATIVE_INFINITY))
      this.table.remove(record.domain, record.entries);
    for (const record of state.overrides) {
      try {
        this.table.put(record);
      } catch (error) {
        skipped.push({ record, error });
      }
    }
    this.audit = state.audit.slice(-this.auditLogMax);
    return skipped;
  }

  /** Removes the overrides expired now and writes their `expire` records. */
  sweep(): void {
    const nowMs = this.clock.nowMs();
    for (const record of this.table.takeExpired(nowMs)) {
      this.logger.info(
        { domain: record.domain, entries: record.entries },
        "override expired",
      );
      this.append({
        timeMs: record.expireMs ?? nowMs,
        domain: record.domain,
        actor: expiryActor,
        action: "expire",
        reason: "expired",
        before: record,
        after: undefined,
      });
    }
  }

  private append(entry: AuditEntry): void {
    this.audit.push(entry);
    if (this.audit.length >= 2 * this.auditLogMax)
      this.audit = this.audit.slice(-this.auditLogMax);
  }
}
