// The overrides of the replicas behind one kv store (BACKEND_TYPE=kv), mirrored into each
// replica's table (docs/operations.md, "Overrides"). The store speaks to the kv instance
// through an {@link OverrideStorage} (backends/kv/kv-override-commands.ts holds the layout:
// a hash per domain with its `#version` and `#changes`, the domain set, the audit list and
// the change channel, under `CACHE_KEY_PREFIX`).
//
// A replica applies its own changes at once and a change announced by another as soon as the
// message arrives (it reads the field). Messages can be missed (reconnect, a subscriber that
// was down): every sync interval each replica compares the version of every domain with the
// one its copy was read at and, for a domain that moved, reads the fields its change log lists
// since then; so a change reaches every replica within one interval (500 ms by default) even
// without its message. Only when the log does not cover the gap (more than 128 changes
// missed, a change written by hand or by a replica of a version before `#changes`, the hash
// recreated) is the domain read whole.
//
// Reading a domain whole (the first load, or such a gap) goes a chunk of fields at a time
// (HSCAN), each chunk parsed and put in the table before the next is asked for: a million
// overrides never exist at once as one reply, one object of a million properties and a
// million records (the HGETALL this replaced held the process at 1.5 GiB RSS after the
// start, docs/operations.md "Cost"). `start` waits for the first load while the store
// answers, so the port opens with the table complete.
//
// Expiry: an override stops applying at its expiry on every replica (the table checks it on a
// hit). Every replica then tries to delete it with a compare-and-delete script; the one whose
// script deleted it (HDEL answered 1) writes the `expire` audit record, so there is one.
//
// A store failure never reaches ShouldRateLimit: the table keeps the last copy.

import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import { BackendError } from "../limiter/backend-error.js";
import type { AuditRecord } from "../proto.js";
import type { Clock } from "../util/clock.js";
import {
  descriptorText,
  parseDescriptorText,
  type OverrideEntry,
} from "./override-key.js";
import {
  auditFromJson,
  auditToJson,
  overrideFromJson,
  overrideToJson,
  toOverrideMessage,
  type AuditEntry,
} from "./override-message.js";
import type { OverrideRecord, OverrideTable } from "./override-table.js";
import { expiryActor, type OverrideStore } from "./override-store.js";
import { toJson } from "@bufbuild/protobuf";
import { TimestampSchema, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { compileOverrideLimit } from "./override-limit.js";
import type { OverrideStorage } from "./override-storage.js";

/** Options of {@link KvOverrideStore}. */
export interface KvOverrideStoreOptions {
  readonly table: OverrideTable;
  /**
   * The shared storage (connected by `start`): `KvOverrideCommands` of backends/kv, under
   * `CACHE_KEY_PREFIX`.
   */
  readonly storage: OverrideStorage;
  /** `ADMIN_AUDIT_LOG_MAX`: audit records kept, ≥ 1. */
  readonly auditLogMax: number;
  /**
   * `ADMIN_OVERRIDES_SYNC_INTERVAL`, ms: how often the domains' versions are compared (and
   * expired overrides deleted). @defaultValue 500
   */
  readonly syncIntervalMs?: number;
  /** This replica's id in announcements (its own are ignored). @defaultValue random */
  readonly replicaId?: string;
  /**
   * Called once, when `start` has waited for the first load and it succeeded: the overrides
   * the table holds and the ms the start took (the app compacts the heap after a large load).
   */
  readonly onFirstLoad?: (overrides: number, ms: number) => void;
  readonly clock: Clock;
  readonly logger: Logger;
}

/** The {@link OverrideStore} shared through the kv store (see the file header). */
export class KvOverrideStore implements OverrideStore {
  readonly kind = "kv";
  readonly table: OverrideTable;
  readonly replicaId: string;
  private readonly storage: OverrideStorage;
  private readonly auditLogMax: number;
  private readonly syncIntervalMs: number;
  private readonly clock: Clock;
  private readonly logger: Logger;
  private readonly onFirstLoad:
    ((overrides: number, ms: number) => void) | undefined;
  /** Per domain, the `#version` the table's copy was read at. */
  private readonly versions = new Map<string, number>();
  /** Per domain, fields to read again at the next sync (a read or a delete that failed). */
  private readonly stale = new Map<string, Set<string>>();
  /** Replies from the store during syncs: `start` waits while this moves. */
  private answers = 0;
  private timer: NodeJS.Timeout | undefined;
  private syncing: Promise<void> | undefined;
  private degraded = false;
  private closed = false;

  constructor(options: KvOverrideStoreOptions) {
    if (!Number.isInteger(options.auditLogMax) || options.auditLogMax < 1)
      throw new RangeError(
        `auditLogMax must be an integer >= 1, got ${String(options.auditLogMax)}`,
      );
    this.table = options.table;
    this.storage = options.storage;
    this.auditLogMax = options.auditLogMax;
    this.syncIntervalMs = options.syncIntervalMs ?? 500;
    this.replicaId = options.replicaId ?? randomBytes(6).toString("hex");
    this.clock = options.clock;
    this.logger = options.logger;
    this.onFirstLoad = options.onFirstLoad;
    this.storage.onAnnouncement((message) => {
      this.heard(message);
    });
    // Subscribes on every (re)connection, and catches up with what was missed meanwhile.
    this.storage.onChannelReady(() => {
      this.listen();
      void this.sync();
    });
  }

  /**
   * Connects, loads every domain's overrides and starts the sync; resolves after the first
   * load, or once the store has not answered for `timeoutMs` (the table then fills when it
   * does). A load that goes on answering (a million overrides take seconds) is waited for, so
   * the caller opens its ports with the table complete.
   *
   * @param timeoutMs - ms without a reply from the store after which the wait ends
   */
  async start(timeoutMs = 5_000): Promise<void> {
    this.storage.connect();
    if (this.storage.channelReady) this.listen();
    const startedMs = performance.now();
    // The first load waits for the connection (commands fail fast while it is not ready).
    const storage = this.storage;
    const loaded = storage.ready
      ? this.sync()
      : new Promise<void>((resolve) => {
          storage.onceReady(() => {
            resolve(this.sync());
          });
        });
    for (;;) {
      const answers = this.answers;
      let timeout: NodeJS.Timeout | undefined;
      const timedOut = new Promise<boolean>((resolve) => {
        timeout = setTimeout(resolve, timeoutMs, true);
        timeout.unref();
      });
      const late = await Promise.race([loaded.then(() => false), timedOut]);
      clearTimeout(timeout);
      if (!late) {
        if (!this.degraded)
          this.onFirstLoad?.(this.table.size, performance.now() - startedMs);
        break;
      }
      // Silent for timeoutMs: the table fills when the store answers.
      if (this.answers === answers) break;
    }
    this.timer ??= setInterval(() => {
      void this.sync();
    }, this.syncIntervalMs);
    this.timer.unref();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.timer);
    await this.storage.close();
  }

  async set(record: OverrideRecord): Promise<OverrideRecord | undefined> {
    // Refuses a limit that does not compile before anything is written.
    compileOverrideLimit(record.limit);
    const field = descriptorText(record.entries);
    let old: OverrideRecord | undefined;
    let version: number;
    try {
      await this.storage.addDomain(record.domain);
      const change = await this.storage.putOverride(
        record.domain,
        field,
        overrideToJson(record),
      );
      old = change.previous === null ? undefined : parseStored(change.previous);
      version = change.version;
    } catch (err) {
      throw this.storeError("the override was not set", err);
    }
    this.applyOwn(record.domain, version, () => this.table.put(record));
    await this.finishChange(record.domain, field, version, {
      timeMs: record.updateMs,
      domain: record.domain,
      actor: record.actor,
      action: "set",
      reason: record.reason,
      before: old,
      after: record,
    });
    return old;
  }

  async delete(
    domain: string,
    entries: readonly OverrideEntry[],
    actor: string,
    reason: string,
  ): Promise<OverrideRecord | undefined> {
    const field = descriptorText(entries);
    let old: OverrideRecord | undefined;
    let version: number;
    try {
      const change = await this.storage.removeOverride(domain, field);
      old = change.previous === null ? undefined : parseStored(change.previous);
      version = change.version;
    } catch (err) {
      throw this.storeError("the override was not deleted", err);
    }
    if (version === 0) {
      this.table.remove(domain, entries);
      return undefined;
    }
    this.applyOwn(domain, version, () => this.table.remove(domain, entries));
    const nowMs = this.clock.nowMs();
    const expired =
      old?.expireMs !== undefined && old.expireMs <= nowMs ? old : undefined;
    await this.finishChange(domain, field, version, {
      timeMs: expired?.expireMs ?? nowMs,
      domain,
      actor: expired !== undefined ? expiryActor : actor,
      action: expired !== undefined ? "expire" : "delete",
      reason: expired !== undefined ? "expired" : reason,
      before: old,
      after: undefined,
    });
    return expired !== undefined ? undefined : old;
  }

  async auditLog(
    domain: string | undefined,
    limit: number,
  ): Promise<AuditRecord[]> {
    let texts: string[];
    try {
      texts = await this.storage.readAudit(this.auditLogMax);
    } catch (err) {
      throw this.storeError("the audit log could not be read", err);
    }
    const out: AuditRecord[] = [];
    for (const text of texts) {
      if (out.length >= limit) break;
      let record: AuditRecord;
      try {
        record = auditFromJson(text);
      } catch {
        continue; // Not ours (or damaged): skipped, as the stored overrides are.
      }
      if (domain === undefined || record.domain === domain) out.push(record);
    }
    return out;
  }

  /**
   * Compares every domain's version with the table's copy and reloads the domains that moved,
   * then deletes the overrides expired now. Runs one at a time; never throws.
   */
  sync(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.syncing ??= this.syncOnce().finally(() => {
      this.syncing = undefined;
    });
    return this.syncing;
  }

  private async syncOnce(): Promise<void> {
    try {
      const domains = await this.storage.domains();
      this.answers++;
      const versions = await this.storage.versions(domains);
      this.answers++;
      for (const [i, domain] of domains.entries()) {
        const version = versions[i] ?? 0;
        if (this.versions.get(domain) !== version)
          await this.catchUp(domain, version);
      }
      for (const [domain, fields] of this.stale) {
        const read = [...fields];
        await this.reread(domain, read);
        for (const field of read) fields.delete(field);
        if (fields.size === 0) this.stale.delete(domain);
      }
      // A domain gone from the set (the store was flushed): its overrides are gone too.
      const listed = new Set(domains);
      for (const domain of this.table.domainNames())
        if (!listed.has(domain)) {
          this.table.replaceDomain(domain, []);
          this.versions.delete(domain);
        }
      await this.sweepExpired();
      this.recovered();
    } catch (err) {
      this.failed(err);
    }
  }

  /**
   * Brings a domain whose `#version` moved up to date: reads the fields its `#changes` lists
   * since the version the table's copy was read at, or the whole hash when they do not cover
   * the gap (or the table has no copy yet).
   */
  private async catchUp(domain: string, seen: number): Promise<void> {
    const known = this.versions.get(domain);
    if (known !== undefined && seen > known) {
      const { version, fields } = await this.storage.changesSince(
        domain,
        known,
      );
      this.answers++;
      if (fields !== undefined) {
        await this.reread(domain, fields);
        this.raise(domain, version);
        return;
      }
    }
    await this.reload(domain);
  }

  /** Reads some fields of a domain's hash and applies each to the table. */
  private async reread(
    domain: string,
    fields: readonly string[],
  ): Promise<void> {
    if (fields.length === 0) return;
    const values = await this.storage.readOverrides(domain, fields);
    this.answers++;
    for (const [i, field] of fields.entries())
      this.applyField(domain, field, values[i] ?? null);
  }

  /**
   * Applies one field of a domain's hash to the table: its override, or its removal when
   * `json` is `null`. A value that does not parse, or whose limit does not compile here, is
   * skipped with a warning naming the field (the table then holds no override for it, as
   * after reading the domain whole).
   */
  private applyField(domain: string, field: string, json: string | null): void {
    let entries: OverrideEntry[];
    try {
      entries = parseDescriptorText(field);
    } catch (err) {
      this.logger.warn(
        { domain, field, err: errorText(err) },
        "stored override skipped: not readable",
      );
      return;
    }
    if (json === null) {
      this.table.remove(domain, entries);
      return;
    }
    const record = this.readStored(domain, field, json);
    if (record === undefined) {
      this.table.remove(domain, entries);
      return;
    }
    try {
      this.table.put(record);
    } catch (err) {
      this.table.remove(domain, entries);
      this.compileWarning(record, err);
    }
  }

  /**
   * The record of one stored field, or `undefined` (with a warning naming the field) when it
   * does not parse or is not the override of its domain and field.
   */
  private readStored(
    domain: string,
    field: string,
    json: string,
  ): OverrideRecord | undefined {
    try {
      const record = overrideFromJson(json);
      if (record.domain === domain && descriptorText(record.entries) === field)
        return record;
      throw new RangeError("its domain or entries differ from its key");
    } catch (err) {
      this.logger.warn(
        { domain, field, err: errorText(err) },
        "stored override skipped: not readable",
      );
      return undefined;
    }
  }

  private compileWarning(record: OverrideRecord, err: unknown): void {
    this.logger.warn(
      { domain: record.domain, entries: record.entries, err: errorText(err) },
      "stored override skipped: its limit does not compile here",
    );
  }

  /**
   * Reads one domain whole, a chunk at a time, and makes the table's copy of it: each chunk
   * is parsed and put before the next is asked for, so the memory the load takes beyond the
   * table is one chunk's. Its version is read first: a change made while the scan runs has a
   * later one, and is read again from the change log at the next sync.
   */
  private async reload(domain: string): Promise<void> {
    const version = await this.storage.version(domain);
    this.answers++;
    const resync = this.table.beginResync(domain);
    await this.storage.scanOverrides(domain, (chunk) => {
      this.answers++;
      // Field, value, field, value, …
      for (let i = 0; i + 1 < chunk.length; i += 2) {
        const record = this.readStored(
          domain,
          chunk[i] ?? "",
          chunk[i + 1] ?? "",
        );
        if (record === undefined) continue;
        try {
          resync.put(record);
        } catch (err) {
          this.compileWarning(record, err);
        }
      }
    });
    resync.finish();
    this.versions.set(domain, version);
  }

  /**
   * Takes the overrides expired now from the table and deletes each from the store, if it
   * still holds it: of replicas sweeping at once, the one whose delete succeeded writes the
   * `expire` record. {@link KvOverrideStore.sync} calls it; never throws.
   */
  async sweepExpired(): Promise<void> {
    const expired = this.table.takeExpired(this.clock.nowMs());
    for (const record of expired) {
      const message = toOverrideMessage(record);
      const field = descriptorText(record.entries);
      try {
        const version = await this.storage.removeExpired(
          record.domain,
          field,
          message.expireTime === undefined
            ? ""
            : toJson(TimestampSchema, message.expireTime),
          toJson(TimestampSchema, timestampFromMs(record.updateMs)),
        );
        if (version === 0) continue; // Another replica deleted it (or it was set again).
        this.logger.info(
          { domain: record.domain, entries: record.entries },
          "override expired",
        );
        this.advance(record.domain, version);
        await this.finishChange(record.domain, field, version, {
          timeMs: record.expireMs ?? this.clock.nowMs(),
          domain: record.domain,
          actor: expiryActor,
          action: "expire",
          reason: "expired",
          before: record,
          after: undefined,
        });
      } catch (err) {
        // Re-read the field at the next sync: the expired override comes back (from the
        // store) and its deletion is tried again.
        this.markStale(record.domain, field);
        this.failed(err);
      }
    }
  }

  /**
   * Applies this replica's own change to the table, and moves the domain's version with it
   * when no other change came between (else the next sync reloads the domain).
   */
  private applyOwn(domain: string, version: number, apply: () => void): void {
    apply();
    this.advance(domain, version);
  }

  private advance(domain: string, version: number): void {
    const known = this.versions.get(domain);
    if (known !== undefined && known + 1 === version)
      this.versions.set(domain, version);
  }

  /** Moves a domain's known version up to `version` (never down: a change may have passed it). */
  private raise(domain: string, version: number): void {
    const known = this.versions.get(domain);
    if (known === undefined || known < version)
      this.versions.set(domain, version);
  }

  /** Reads a field again at the next sync. */
  private markStale(domain: string, field: string): void {
    let fields = this.stale.get(domain);
    if (fields === undefined) {
      fields = new Set();
      this.stale.set(domain, fields);
    }
    fields.add(field);
  }

  /** Appends the audit record and announces the change. */
  private async finishChange(
    domain: string,
    field: string,
    version: number,
    audit: AuditEntry,
  ): Promise<void> {
    try {
      await this.storage.appendAudit(auditToJson(audit), this.auditLogMax);
      await this.storage.announce(
        JSON.stringify([this.replicaId, domain, field, version]),
      );
    } catch (err) {
      throw this.storeError(
        `the override was ${audit.action === "set" ? "set" : "deleted"}, but its audit record or announcement failed (other replicas still see it within ${String(this.syncIntervalMs)} ms)`,
        err,
      );
    }
  }

  /** Another replica's announcement: reads the field it changed. */
  private heard(message: string): void {
    let parsed: unknown;
    try {
      parsed = JSON.parse(message);
    } catch {
      return;
    }
    if (!Array.isArray(parsed)) return;
    const [replica, domain, field, version] = parsed as unknown[];
    if (
      replica === this.replicaId ||
      typeof domain !== "string" ||
      typeof field !== "string" ||
      typeof version !== "number"
    )
      return;
    void this.refresh(domain, field, version);
  }

  private async refresh(
    domain: string,
    field: string,
    version: number,
  ): Promise<void> {
    let json: string | null;
    try {
      json = await this.storage.readOverride(domain, field);
    } catch (err) {
      this.markStale(domain, field);
      this.logger.warn(
        { domain, field, err: errorText(err) },
        "announced override change not applied: the next sync reads it again",
      );
      return;
    }
    this.applyField(domain, field, json);
    this.advance(domain, version);
  }

  private listen(): void {
    if (this.closed) return;
    this.storage.listen().catch((err: unknown) => {
      this.failed(err);
    });
  }

  private storeError(what: string, err: unknown): BackendError {
    this.failed(err);
    return new BackendError(
      "kv",
      `override store unavailable: ${what}: ${errorText(err)}`,
      { cause: err },
    );
  }

  private failed(err: unknown): void {
    if (this.degraded || this.closed) return;
    this.degraded = true;
    this.logger.warn(
      { err: errorText(err) },
      "override store unreachable: decisions use the overrides last read until it answers",
    );
  }

  private recovered(): void {
    if (!this.degraded) return;
    this.degraded = false;
    this.logger.warn("override store reachable again");
  }
}

function parseStored(json: string): OverrideRecord | undefined {
  try {
    return overrideFromJson(json);
  } catch {
    return undefined;
  }
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
