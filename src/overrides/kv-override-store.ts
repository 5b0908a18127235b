// The overrides of the replicas behind one kv store (BACKEND_TYPE=kv), mirrored into each
// replica's table (docs/operations.md, "Overrides").
//
// Layout under `CACHE_KEY_PREFIX` (`<p>`):
// - `<p>ratelimit_overrides_<domain>`: a hash per domain, field = the descriptor text
//   (`tenant=acme,plan=gold`), value = the `Override` message's proto3 JSON; plus the field
//   `#version` (no descriptor text lacks an `=`), raised by every change in the same script
//   that makes it, so a replica can tell whether its copy of the domain is current;
// - `<p>ratelimit_override_domains`: a set of the domains that ever had one;
// - `<p>ratelimit_override_audit`: a list of `AuditRecord` JSON, newest first, trimmed to
//   `ADMIN_AUDIT_LOG_MAX` (LPUSH, LTRIM);
// - `<p>ratelimit_override_changes`: the channel on which a change is announced.
//
// A replica applies its own changes at once and a change announced by another as soon as the
// message arrives (it reads the field). Messages can be missed (reconnect, a subscriber that
// was down): every sync interval each replica compares the `#version` of every domain with the
// one its copy was read at and reloads the domains that moved, so a change reaches every
// replica within one interval (500 ms by default) even without its message.
//
// Expiry: an override stops applying at its expiry on every replica (the table checks it on a
// hit). Every replica then tries to delete it with a compare-and-delete script; the one whose
// script deleted it (HDEL answered 1) writes the `expire` audit record, so there is one.
//
// Cluster: every script touches one key (the domain's hash), so it runs in one slot.
// A store failure never reaches ShouldRateLimit: the table keeps the last copy.

import { randomBytes } from "node:crypto";
import type { Cluster, Redis } from "ioredis";
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

/** The hash field holding a domain's version (a descriptor text always has an `=`). */
export const versionField = "#version";

/** The hash of a domain's overrides. */
export function kvOverridesKey(prefix: string, domain: string): string {
  return `${prefix}ratelimit_overrides_${domain}`;
}

/** The set of the domains with overrides. */
export function kvOverrideDomainsKey(prefix: string): string {
  return `${prefix}ratelimit_override_domains`;
}

/** The audit list, newest first. */
export function kvOverrideAuditKey(prefix: string): string {
  return `${prefix}ratelimit_override_audit`;
}

/** The channel on which changes are announced. */
export function kvOverrideChannel(prefix: string): string {
  return `${prefix}ratelimit_override_changes`;
}

// KEYS[1] hash; ARGV[1] field, ARGV[2] value. Returns { old value or false, new version }.
const setScript = `
local old = redis.call('HGET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local version = redis.call('HINCRBY', KEYS[1], '${versionField}', 1)
return { old, version }`;

// KEYS[1] hash; ARGV[1] field. Returns { old value or false, new version (0: nothing deleted) }.
const deleteScript = `
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old then return { false, 0 } end
redis.call('HDEL', KEYS[1], ARGV[1])
local version = redis.call('HINCRBY', KEYS[1], '${versionField}', 1)
return { old, version }`;

// KEYS[1] hash; ARGV[1] field, ARGV[2] the expireTime and ARGV[3] the updateTime (proto3 JSON)
// of the expired override. Deletes the field only when it still holds that override (not one
// set again since). Returns the new version, or 0 when nothing was deleted.
const expireScript = `
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
local ok, stored = pcall(cjson.decode, current)
if not ok or stored['expireTime'] ~= ARGV[2] or stored['updateTime'] ~= ARGV[3] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return redis.call('HINCRBY', KEYS[1], '${versionField}', 1)`;

/** Options of {@link KvOverrideStore}. */
export interface KvOverrideStoreOptions {
  readonly table: OverrideTable;
  /** Connection for the commands (connected by `start`). */
  readonly client: Redis | Cluster;
  /** Connection that only SUBSCRIBEs. */
  readonly subscriber: Redis | Cluster;
  /** `CACHE_KEY_PREFIX`, before every key and the channel. @defaultValue "" */
  readonly keyPrefix?: string;
  /** `ADMIN_AUDIT_LOG_MAX`: audit records kept, ≥ 1. */
  readonly auditLogMax: number;
  /**
   * `ADMIN_OVERRIDES_SYNC_INTERVAL`, ms: how often the domains' versions are compared (and
   * expired overrides deleted). @defaultValue 500
   */
  readonly syncIntervalMs?: number;
  /** This replica's id in announcements (its own are ignored). @defaultValue random */
  readonly replicaId?: string;
  readonly clock: Clock;
  readonly logger: Logger;
}

/** The {@link OverrideStore} shared through the kv store (see the file header). */
export class KvOverrideStore implements OverrideStore {
  readonly kind = "kv";
  readonly table: OverrideTable;
  readonly replicaId: string;
  private readonly client: Redis | Cluster;
  private readonly subscriber: Redis | Cluster;
  private readonly prefix: string;
  private readonly channel: string;
  private readonly auditLogMax: number;
  private readonly syncIntervalMs: number;
  private readonly clock: Clock;
  private readonly logger: Logger;
  /** Per domain, the `#version` the table's copy was read at. */
  private readonly versions = new Map<string, number>();
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
    this.client = options.client;
    this.subscriber = options.subscriber;
    this.prefix = options.keyPrefix ?? "";
    this.channel = kvOverrideChannel(this.prefix);
    this.auditLogMax = options.auditLogMax;
    this.syncIntervalMs = options.syncIntervalMs ?? 500;
    this.replicaId = options.replicaId ?? randomBytes(6).toString("hex");
    this.clock = options.clock;
    this.logger = options.logger;
    this.subscriber.on("message", (channel: string, message: string) => {
      if (channel === this.channel) this.heard(message);
    });
    // Subscribes on every (re)connection, and catches up with what was missed meanwhile.
    this.subscriber.on("ready", () => {
      this.subscribe();
      void this.sync();
    });
  }

  /**
   * Connects, loads every domain's overrides and starts the sync; resolves after the first
   * load or after `timeoutMs` (the table then fills when the store answers).
   */
  async start(timeoutMs = 5_000): Promise<void> {
    for (const connection of [this.client, this.subscriber]) {
      if (connection.status === "wait")
        connection.connect().catch(() => undefined);
    }
    if (this.subscriber.status === "ready") this.subscribe();
    let timeout: NodeJS.Timeout | undefined;
    const timedOut = new Promise<void>((resolve) => {
      timeout = setTimeout(resolve, timeoutMs);
      timeout.unref();
    });
    // The first load waits for the connection (commands fail fast while it is not ready).
    const client = this.client;
    await Promise.race([
      client.status === "ready"
        ? this.sync()
        : new Promise<void>((resolve) => {
            client.once("ready", () => {
              resolve(this.sync());
            });
          }),
      timedOut,
    ]);
    clearTimeout(timeout);
    this.timer ??= setInterval(() => {
      void this.sync();
    }, this.syncIntervalMs);
    this.timer.unref();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.timer);
    await Promise.all(
      [this.client, this.subscriber].map((c) =>
        c.quit().then(
          () => undefined,
          () => {
            c.disconnect();
          },
        ),
      ),
    );
  }

  async set(record: OverrideRecord): Promise<OverrideRecord | undefined> {
    // Refuses a limit that does not compile before anything is written.
    compileOverrideLimit(record.limit);
    const key = kvOverridesKey(this.prefix, record.domain);
    const field = descriptorText(record.entries);
    let old: OverrideRecord | undefined;
    let version: number;
    try {
      await this.client.sadd(kvOverrideDomainsKey(this.prefix), record.domain);
      const [oldJson, newVersion] = (await this.client.eval(
        setScript,
        1,
        key,
        field,
        overrideToJson(record),
      )) as [string | null, number];
      old = oldJson === null ? undefined : parseStored(oldJson);
      version = newVersion;
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
      const [oldJson, newVersion] = (await this.client.eval(
        deleteScript,
        1,
        kvOverridesKey(this.prefix, domain),
        field,
      )) as [string | null, number];
      old = oldJson === null ? undefined : parseStored(oldJson);
      version = newVersion;
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
      texts = await this.client.lrange(
        kvOverrideAuditKey(this.prefix),
        0,
        this.auditLogMax - 1,
      );
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
      const domains = await this.client.smembers(
        kvOverrideDomainsKey(this.prefix),
      );
      const versions = await Promise.all(
        domains.map((domain) =>
          this.client.hget(kvOverridesKey(this.prefix, domain), versionField),
        ),
      );
      const moved = domains.filter(
        (domain, i) => this.versions.get(domain) !== Number(versions[i] ?? "0"),
      );
      for (const domain of moved) await this.reload(domain);
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

  /** Reads one domain's hash whole and makes the table's copy of it. */
  private async reload(domain: string): Promise<void> {
    const fields = await this.client.hgetall(
      kvOverridesKey(this.prefix, domain),
    );
    const records: OverrideRecord[] = [];
    for (const [field, json] of Object.entries(fields)) {
      if (field === versionField) continue;
      try {
        const record = overrideFromJson(json);
        if (
          record.domain === domain &&
          descriptorText(record.entries) === field
        )
          records.push(record);
        else throw new RangeError("its domain or entries differ from its key");
      } catch (err) {
        this.logger.warn(
          { domain, field, err: errorText(err) },
          "stored override skipped: not readable",
        );
      }
    }
    for (const { record, error } of this.table.replaceDomain(domain, records))
      this.logger.warn(
        { domain, entries: record.entries, err: errorText(error) },
        "stored override skipped: its limit does not compile here",
      );
    this.versions.set(domain, Number(fields[versionField] ?? "0"));
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
        const version = (await this.client.eval(
          expireScript,
          1,
          kvOverridesKey(this.prefix, record.domain),
          field,
          message.expireTime === undefined
            ? ""
            : toJson(TimestampSchema, message.expireTime),
          toJson(TimestampSchema, timestampFromMs(record.updateMs)),
        )) as number;
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
        // Re-read the domain at the next sync: the expired override comes back (from the
        // store) and its deletion is tried again.
        this.versions.delete(record.domain);
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

  /** Appends the audit record and announces the change. */
  private async finishChange(
    domain: string,
    field: string,
    version: number,
    audit: AuditEntry,
  ): Promise<void> {
    const auditKey = kvOverrideAuditKey(this.prefix);
    try {
      await this.client.lpush(auditKey, auditToJson(audit));
      await this.client.ltrim(auditKey, 0, this.auditLogMax - 1);
      await this.client.publish(
        this.channel,
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
    try {
      const json = await this.client.hget(
        kvOverridesKey(this.prefix, domain),
        field,
      );
      const entries = parseDescriptorText(field);
      if (json === null) this.table.remove(domain, entries);
      else {
        const record = overrideFromJson(json);
        this.table.put(record);
      }
      this.advance(domain, version);
    } catch (err) {
      // The next sync reloads the domain.
      this.versions.delete(domain);
      this.logger.warn(
        { domain, field, err: errorText(err) },
        "announced override change not applied: the next sync reloads its domain",
      );
    }
  }

  private subscribe(): void {
    if (this.closed) return;
    this.subscriber.subscribe(this.channel).catch((err: unknown) => {
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
