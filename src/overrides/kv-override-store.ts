// The overrides of the replicas behind one kv store (BACKEND_TYPE=kv), mirrored into each
// replica's table (docs/operations.md, "Overrides").
//
// Layout under `CACHE_KEY_PREFIX` (`<p>`):
// - `<p>ratelimit_overrides_<domain>`: a hash per domain, field = the descriptor text
//   (`tenant=acme,plan=gold`), value = the `Override` message's proto3 JSON; plus two fields
//   no descriptor text can be (each lacks an `=`), written by every change in the same script
//   that makes it: `#version`, raised by one, so a replica can tell whether its copy of the
//   domain is current, and `#changes`, the last 128 changes as a JSON array of
//   `[version, field]`, so a replica that is behind reads the fields that changed instead of
//   the whole hash;
// - `<p>ratelimit_override_domains`: a set of the domains that ever had one;
// - `<p>ratelimit_override_audit`: a list of `AuditRecord` JSON, newest first, trimmed to
//   `ADMIN_AUDIT_LOG_MAX` (LPUSH, LTRIM);
// - `<p>ratelimit_override_changes`: the channel on which a change is announced.
//
// A replica applies its own changes at once and a change announced by another as soon as the
// message arrives (it reads the field). Messages can be missed (reconnect, a subscriber that
// was down): every sync interval each replica compares the `#version` of every domain with the
// one its copy was read at and, for a domain that moved, reads the fields `#changes` lists
// since then; so a change reaches every replica within one interval (500 ms by default) even
// without its message. Only when `#changes` does not cover the gap (more than 128 changes
// missed, a change written by hand or by a replica of a version before `#changes`, the hash
// recreated) is the domain read whole.
//
// Reading a domain whole (the first load, or such a gap) goes by HSCAN, a chunk of fields at
// a time, each chunk parsed and put in the table before the next is asked for: a million
// overrides never exist at once as one reply, one object of a million properties and a
// million records (the HGETALL this replaced held the process at 1.5 GiB RSS after the
// start, docs/operations.md "Cost"). `start` waits for the first load while the store
// answers, so the port opens with the table complete.
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

/**
 * The hash field listing a domain's last {@link changeLogLength} changes, oldest first: a
 * JSON array of `[version, field]` (written by the change scripts with Lua's cjson).
 */
export const changesField = "#changes";

/** Changes `#changes` keeps: a replica further behind reads its domain whole. */
export const changeLogLength = 128;

/** Fields per HSCAN call when a domain is read whole (COUNT; redis returns about as many). */
const scanCount = 1000;

// Appends { version, field } to KEYS[1]'s change list, keeping the last ${changeLogLength}. A
// list that does not decode is started again (replicas behind it then read the domain whole).
const logChange = `
local function logChange(version, field)
  local log = {}
  local raw = redis.call('HGET', KEYS[1], '${changesField}')
  if raw then
    local ok, decoded = pcall(cjson.decode, raw)
    if ok and type(decoded) == 'table' then log = decoded end
  end
  log[#log + 1] = { version, field }
  while #log > ${String(changeLogLength)} do table.remove(log, 1) end
  redis.call('HSET', KEYS[1], '${changesField}', cjson.encode(log))
end`;

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
const setScript = `${logChange}
local old = redis.call('HGET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local version = redis.call('HINCRBY', KEYS[1], '${versionField}', 1)
logChange(version, ARGV[1])
return { old, version }`;

// KEYS[1] hash; ARGV[1] field. Returns { old value or false, new version (0: nothing deleted) }.
const deleteScript = `${logChange}
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old then return { false, 0 } end
redis.call('HDEL', KEYS[1], ARGV[1])
local version = redis.call('HINCRBY', KEYS[1], '${versionField}', 1)
logChange(version, ARGV[1])
return { old, version }`;

// KEYS[1] hash; ARGV[1] field, ARGV[2] the expireTime and ARGV[3] the updateTime (proto3 JSON)
// of the expired override. Deletes the field only when it still holds that override (not one
// set again since). Returns the new version, or 0 when nothing was deleted.
const expireScript = `${logChange}
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
local ok, stored = pcall(cjson.decode, current)
if not ok or stored['expireTime'] ~= ARGV[2] or stored['updateTime'] ~= ARGV[3] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
local version = redis.call('HINCRBY', KEYS[1], '${versionField}', 1)
logChange(version, ARGV[1])
return version`;

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
  private readonly client: Redis | Cluster;
  private readonly subscriber: Redis | Cluster;
  private readonly prefix: string;
  private readonly channel: string;
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
    this.client = options.client;
    this.subscriber = options.subscriber;
    this.prefix = options.keyPrefix ?? "";
    this.channel = kvOverrideChannel(this.prefix);
    this.auditLogMax = options.auditLogMax;
    this.syncIntervalMs = options.syncIntervalMs ?? 500;
    this.replicaId = options.replicaId ?? randomBytes(6).toString("hex");
    this.clock = options.clock;
    this.logger = options.logger;
    this.onFirstLoad = options.onFirstLoad;
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
   * load, or once the store has not answered for `timeoutMs` (the table then fills when it
   * does). A load that goes on answering (a million overrides take seconds) is waited for, so
   * the caller opens its ports with the table complete.
   *
   * @param timeoutMs - ms without a reply from the store after which the wait ends
   */
  async start(timeoutMs = 5_000): Promise<void> {
    for (const connection of [this.client, this.subscriber]) {
      if (connection.status === "wait")
        connection.connect().catch(() => undefined);
    }
    if (this.subscriber.status === "ready") this.subscribe();
    const startedMs = performance.now();
    // The first load waits for the connection (commands fail fast while it is not ready).
    const client = this.client;
    const loaded =
      client.status === "ready"
        ? this.sync()
        : new Promise<void>((resolve) => {
            client.once("ready", () => {
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
      this.answers++;
      const versions = await Promise.all(
        domains.map((domain) =>
          this.client.hget(kvOverridesKey(this.prefix, domain), versionField),
        ),
      );
      this.answers++;
      for (const [i, domain] of domains.entries()) {
        const version = Number(versions[i] ?? "0");
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
      const [versionText, logText] = await this.client.hmget(
        kvOverridesKey(this.prefix, domain),
        versionField,
        changesField,
      );
      this.answers++;
      const version = Number(versionText ?? "0");
      const fields = changedSince(logText ?? null, known, version);
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
    const values = await this.client.hmget(
      kvOverridesKey(this.prefix, domain),
      ...fields,
    );
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
   * Reads one domain's hash whole, `scanCount` fields at a time (HSCAN), and makes the table's
   * copy of it: each chunk is parsed and put before the next is asked for, so the memory the
   * load takes beyond the table is one chunk's. Its version is read first: a change made
   * while the scan runs has a later one, and is read again from `#changes` at the next sync.
   */
  private async reload(domain: string): Promise<void> {
    const key = kvOverridesKey(this.prefix, domain);
    const version = Number((await this.client.hget(key, versionField)) ?? "0");
    this.answers++;
    const resync = this.table.beginResync(domain);
    const scan = (cursor: string) =>
      this.client.hscan(key, cursor, "COUNT", scanCount);
    let asked = scan("0");
    for (;;) {
      const [cursor, chunk] = await asked;
      this.answers++;
      // The next chunk is asked for before this one is parsed: the store reads it meanwhile.
      if (cursor !== "0") asked = scan(cursor);
      // Field, value, field, value, …
      for (let i = 0; i + 1 < chunk.length; i += 2) {
        const field = chunk[i] ?? "";
        if (field === versionField || field === changesField) continue;
        const record = this.readStored(domain, field, chunk[i + 1] ?? "");
        if (record === undefined) continue;
        try {
          resync.put(record);
        } catch (err) {
          this.compileWarning(record, err);
        }
      }
      if (cursor === "0") break;
    }
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
    let json: string | null;
    try {
      json = await this.client.hget(kvOverridesKey(this.prefix, domain), field);
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

/**
 * The fields changed after version `known` up to `version`, from a `#changes` value; or
 * `undefined` when it does not list every one of those versions (too far behind, a change
 * written without it, a value that does not parse).
 */
export function changedSince(
  log: string | null,
  known: number,
  version: number,
): string[] | undefined {
  if (
    log === null ||
    !Number.isSafeInteger(version) ||
    version <= known ||
    version - known > changeLogLength
  )
    return undefined;
  let parsed: unknown;
  try {
    parsed = JSON.parse(log);
  } catch {
    return undefined;
  }
  if (!Array.isArray(parsed)) return undefined;
  const byVersion = new Map<number, string>();
  for (const item of parsed as unknown[]) {
    if (!Array.isArray(item)) return undefined;
    const [at, field] = item as unknown[];
    if (typeof at !== "number" || typeof field !== "string") return undefined;
    if (at > known && at <= version) byVersion.set(at, field);
  }
  const fields = new Set<string>();
  for (let at = known + 1; at <= version; at++) {
    const field = byVersion.get(at);
    if (field === undefined) return undefined;
    fields.add(field);
  }
  return [...fields];
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
