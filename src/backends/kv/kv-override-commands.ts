// The Redis side of the run-time overrides shared through the kv store (BACKEND_TYPE=kv): the
// keys, the change scripts, the chunked read of a domain and the change channel that
// `overrides/kv-override-store.ts` uses through its `OverrideStorage` (docs/operations.md,
// "Overrides").
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
// Cluster: every script touches one key (the domain's hash), so it runs in one slot.

import type { KvTlsOptions, ResolvedKvInstanceOptions } from "./kv-options.js";
import { openKvConnection } from "./kv-connection.js";
import { kvSecrets } from "./kv-redact.js";
import { kvScript, runKvScript } from "./kv-scripts.js";
import { KvStateClient, type KvStateClientOptions } from "./kv-state-client.js";

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
const setScript = kvScript(`${logChange}
local old = redis.call('HGET', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local version = redis.call('HINCRBY', KEYS[1], '${versionField}', 1)
logChange(version, ARGV[1])
return { old, version }`);

// KEYS[1] hash; ARGV[1] field. Returns { old value or false, new version (0: nothing deleted) }.
const deleteScript = kvScript(`${logChange}
local old = redis.call('HGET', KEYS[1], ARGV[1])
if not old then return { false, 0 } end
redis.call('HDEL', KEYS[1], ARGV[1])
local version = redis.call('HINCRBY', KEYS[1], '${versionField}', 1)
logChange(version, ARGV[1])
return { old, version }`);

// KEYS[1] hash; ARGV[1] field, ARGV[2] the expireTime and ARGV[3] the updateTime (proto3 JSON)
// of the expired override. Deletes the field only when it still holds that override (not one
// set again since). Returns the new version, or 0 when nothing was deleted.
const expireScript = kvScript(`${logChange}
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
local ok, stored = pcall(cjson.decode, current)
if not ok or stored['expireTime'] ~= ARGV[2] or stored['updateTime'] ~= ARGV[3] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
local version = redis.call('HINCRBY', KEYS[1], '${versionField}', 1)
logChange(version, ARGV[1])
return version`);

/** What a change script answers: the field's value before it, and the domain's new version. */
export interface KvOverrideChange {
  /** The override's JSON before the change; `null` when the field was absent. */
  readonly previous: string | null;
  /** The domain's `#version` after the change; 0 when nothing changed (a delete of nothing). */
  readonly version: number;
}

/**
 * The override store's commands on the kv store (the layout in the file header); meets
 * `OverrideStorage` (overrides/override-storage.ts). Every method's failure is a redacted
 * copy of the store's error.
 */
export class KvOverrideCommands extends KvStateClient {
  constructor(options: KvStateClientOptions) {
    super(options, kvOverrideChannel(options.keyPrefix ?? ""));
  }

  /** Adds `domain` to the set of the domains with overrides (SADD). */
  async addDomain(domain: string): Promise<void> {
    await this.command(() =>
      this.client.sadd(kvOverrideDomainsKey(this.prefix), domain),
    );
  }

  /** The domains that ever had an override (SMEMBERS). */
  domains(): Promise<string[]> {
    return this.command(() =>
      this.client.smembers(kvOverrideDomainsKey(this.prefix)),
    );
  }

  /**
   * Writes one override (`json` at `field` of the domain's hash), raises the domain's version
   * and logs the change, in one script.
   */
  async putOverride(
    domain: string,
    field: string,
    json: string,
  ): Promise<KvOverrideChange> {
    const [previous, version] = (await this.command(() =>
      runKvScript(
        this.client,
        setScript,
        [kvOverridesKey(this.prefix, domain)],
        [field, json],
      ),
    )) as [string | null, number];
    return { previous, version };
  }

  /**
   * Deletes one override, raising the domain's version and logging the change when it was
   * there, in one script.
   */
  async removeOverride(
    domain: string,
    field: string,
  ): Promise<KvOverrideChange> {
    const [previous, version] = (await this.command(() =>
      runKvScript(
        this.client,
        deleteScript,
        [kvOverridesKey(this.prefix, domain)],
        [field],
      ),
    )) as [string | null, number];
    return { previous, version };
  }

  /**
   * Deletes an expired override only when the field still holds it (same `expireTime` and
   * `updateTime`, proto3 JSON timestamps; not one set again since), in one script.
   *
   * @returns the domain's new version, or 0 when nothing was deleted
   */
  async removeExpired(
    domain: string,
    field: string,
    expireTime: string,
    updateTime: string,
  ): Promise<number> {
    return (await this.command(() =>
      runKvScript(
        this.client,
        expireScript,
        [kvOverridesKey(this.prefix, domain)],
        [field, expireTime, updateTime],
      ),
    )) as number;
  }

  /** A domain's `#version` (0 when it has none). */
  async version(domain: string): Promise<number> {
    return Number(
      (await this.command(() =>
        this.client.hget(kvOverridesKey(this.prefix, domain), versionField),
      )) ?? "0",
    );
  }

  /** The `#version` of each domain, parallel to `domains` (one HGET each, sent together). */
  async versions(domains: readonly string[]): Promise<number[]> {
    const versions = await Promise.all(
      domains.map((domain) =>
        this.command(() =>
          this.client.hget(kvOverridesKey(this.prefix, domain), versionField),
        ),
      ),
    );
    return versions.map((version) => Number(version ?? "0"));
  }

  /**
   * A domain's version and the fields changed after version `known` up to it, from its
   * `#changes` (one HMGET); `fields` is `undefined` when `#changes` does not cover the gap
   * ({@link changedSince}).
   */
  async changesSince(
    domain: string,
    known: number,
  ): Promise<{ version: number; fields: string[] | undefined }> {
    const [versionText, logText] = await this.command(() =>
      this.client.hmget(
        kvOverridesKey(this.prefix, domain),
        versionField,
        changesField,
      ),
    );
    const version = Number(versionText ?? "0");
    return { version, fields: changedSince(logText ?? null, known, version) };
  }

  /** The overrides' JSON at `fields` of a domain's hash, parallel to `fields` (`null`: absent). */
  async readOverrides(
    domain: string,
    fields: readonly string[],
  ): Promise<(string | null)[]> {
    const values = await this.command(() =>
      this.client.hmget(kvOverridesKey(this.prefix, domain), ...fields),
    );
    return fields.map((_, i) => values[i] ?? null);
  }

  /** The override's JSON at one field of a domain's hash; `null` when absent. */
  readOverride(domain: string, field: string): Promise<string | null> {
    return this.command(() =>
      this.client.hget(kvOverridesKey(this.prefix, domain), field),
    );
  }

  /**
   * Reads a domain's hash whole by HSCAN, {@link scanCount} fields a call, and hands each
   * reply to `onChunk` as it comes: field, JSON, field, JSON, … (fields at even indexes),
   * without `#version` and `#changes`. The next chunk is asked for before `onChunk` runs (the
   * store reads it meanwhile), so the memory beyond what `onChunk` keeps is about two chunks'.
   */
  async scanOverrides(
    domain: string,
    onChunk: (chunk: readonly string[]) => void,
  ): Promise<void> {
    const key = kvOverridesKey(this.prefix, domain);
    const scan = (cursor: string) =>
      this.command(() => this.client.hscan(key, cursor, "COUNT", scanCount));
    let asked = scan("0");
    for (;;) {
      const [cursor, chunk] = await asked;
      if (cursor !== "0") asked = scan(cursor);
      onChunk(withoutOwnFields(chunk));
      if (cursor === "0") break;
    }
  }

  /** Appends an audit record (LPUSH) and trims the list to its newest `keep` (LTRIM). */
  async appendAudit(json: string, keep: number): Promise<void> {
    const auditKey = kvOverrideAuditKey(this.prefix);
    await this.command(() => this.client.lpush(auditKey, json));
    await this.command(() => this.client.ltrim(auditKey, 0, keep - 1));
  }

  /** The newest `count` audit records' JSON, newest first (LRANGE). */
  readAudit(count: number): Promise<string[]> {
    return this.command(() =>
      this.client.lrange(kvOverrideAuditKey(this.prefix), 0, count - 1),
    );
  }
}

/** An HSCAN reply's field/value pairs without `#version` and `#changes` (a copy only when present). */
function withoutOwnFields(chunk: string[]): string[] {
  let own = false;
  for (let i = 0; i + 1 < chunk.length; i += 2) {
    const field = chunk[i];
    if (field === versionField || field === changesField) own = true;
  }
  if (!own) return chunk;
  const out: string[] = [];
  for (let i = 0; i + 1 < chunk.length; i += 2) {
    const field = chunk[i] ?? "";
    if (field === versionField || field === changesField) continue;
    out.push(field, chunk[i + 1] ?? "");
  }
  return out;
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

/**
 * Opens the override store's two connections to an instance (commands, change channel),
 * lazily; their connection errors are left to the commands that fail (logged once by the
 * store; a change answers UNAVAILABLE), the events themselves would only repeat them.
 */
export function connectKvOverrideCommands(
  instance: ResolvedKvInstanceOptions,
  tls: KvTlsOptions | undefined,
  keyPrefix: string,
): KvOverrideCommands {
  const client = openKvConnection(instance, tls);
  const subscriber = openKvConnection(instance, tls);
  client.on("error", () => undefined);
  subscriber.on("error", () => undefined);
  return new KvOverrideCommands({
    client,
    subscriber,
    keyPrefix,
    secrets: kvSecrets(instance),
  });
}
