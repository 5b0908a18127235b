// The shared storage under the kv override store (kv-override-store.ts): what the store needs
// of it, in the overrides' words. app/ passes the kv store's implementation
// (backends/kv/kv-override-commands.ts), which meets this interface structurally: overrides/
// never imports backends/.

/** What a change answers: the override before it, and the domain's new version. */
export interface OverrideStorageChange {
  /** The override's JSON before the change; `null` when there was none. */
  readonly previous: string | null;
  /** The domain's version after the change; 0 when nothing changed (a delete of nothing). */
  readonly version: number;
}

/**
 * Per domain a versioned map of descriptor text (the field) → override (its proto3 JSON) with
 * a log of its last changes, the set of the domains, the audit list (newest first) and a
 * change channel between the replicas. Every change to a domain's map raises its version by
 * one and logs the field it changed, atomically. Every command rejects with the store's
 * (redacted) error when the store fails; the listeners never throw.
 */
export interface OverrideStorage {
  /** Starts connecting (the commands and the change channel); never throws. */
  connect(): void;
  /** Whether the commands' connection is up. */
  readonly ready: boolean;
  /** Calls `listener` once, the next time the commands' connection comes up. */
  onceReady(listener: () => void): void;
  /** Whether the change channel's connection is up. */
  readonly channelReady: boolean;
  /** Calls `listener` every time the change channel's connection comes up. */
  onChannelReady(listener: () => void): void;
  /** Calls `listener` with every message announced on the change channel (ours too). */
  onAnnouncement(listener: (message: string) => void): void;
  /** Subscribes to the change channel (again after each reconnection). */
  listen(): Promise<void>;
  /** Announces `message` on the change channel. */
  announce(message: string): Promise<void>;
  /** Closes the connections. */
  close(): Promise<void>;

  /** Adds a domain to the set of the domains with overrides. */
  addDomain(domain: string): Promise<void>;
  /** Every domain that ever had an override. */
  domains(): Promise<string[]>;
  /** Writes one override, raising the domain's version. */
  putOverride(
    domain: string,
    field: string,
    json: string,
  ): Promise<OverrideStorageChange>;
  /** Deletes one override, raising the domain's version when it was there. */
  removeOverride(domain: string, field: string): Promise<OverrideStorageChange>;
  /**
   * Deletes an expired override only when the field still holds it (the same `expireTime`
   * and `updateTime`, proto3 JSON timestamps).
   *
   * @returns the domain's new version, or 0 when nothing was deleted
   */
  removeExpired(
    domain: string,
    field: string,
    expireTime: string,
    updateTime: string,
  ): Promise<number>;
  /** A domain's version (0 when it has none). */
  version(domain: string): Promise<number>;
  /** The version of each domain, parallel to `domains`. */
  versions(domains: readonly string[]): Promise<number[]>;
  /**
   * A domain's version and the fields changed after version `known` up to it; `fields` is
   * `undefined` when the change log does not cover the gap (the domain is then read whole).
   */
  changesSince(
    domain: string,
    known: number,
  ): Promise<{ version: number; fields: string[] | undefined }>;
  /** The overrides' JSON at `fields` of a domain, parallel to `fields` (`null`: none). */
  readOverrides(
    domain: string,
    fields: readonly string[],
  ): Promise<(string | null)[]>;
  /** The override's JSON at one field of a domain; `null` when none. */
  readOverride(domain: string, field: string): Promise<string | null>;
  /**
   * Reads a domain whole, a chunk at a time, handing each to `onChunk` as it comes: field,
   * JSON, field, JSON, … (fields at even indexes), the version and change log left out.
   */
  scanOverrides(
    domain: string,
    onChunk: (chunk: readonly string[]) => void,
  ): Promise<void>;
  /** Appends an audit record's JSON and keeps the newest `keep`. */
  appendAudit(json: string, keep: number): Promise<void>;
  /** The newest `count` audit records' JSON, newest first. */
  readAudit(count: number): Promise<string[]>;
}
