// The Redis side of the RLQS ledger shared through the kv store (BACKEND_TYPE=kv): the keys
// and commands `rlqs/kv-quota-ledger.ts` uses through its `LedgerStorage` (docs/rlqs.md,
// "Several replicas"). Under `CACHE_KEY_PREFIX` (`<p>`): `<p>ratelimit_rlqs_<bucket>` a hash
// per bucket (field = stream id, value = the stream's JSON), `<p>ratelimit_rlqs_buckets` the
// set of the buckets, `<p>ratelimit_rlqs_changes` the change channel.

import type { KvTlsOptions, ResolvedKvInstanceOptions } from "./kv-options.js";
import { openKvConnection } from "./kv-connection.js";
import { kvSecrets } from "./kv-redact.js";
import { KvStateClient, type KvStateClientOptions } from "./kv-state-client.js";

/** The hash of a bucket: its ledger key URI-encoded (no spaces, control bytes or braces). */
export function kvLedgerKey(prefix: string, bucket: string): string {
  return `${prefix}ratelimit_rlqs_${encodeURIComponent(bucket)}`;
}

/**
 * The set of the buckets (ledger keys) with a hash in the store, for ListBuckets: added to at
 * every write of a stream's field, pruned of buckets whose hash expired when listed.
 */
export function kvLedgerBucketsKey(prefix: string): string {
  return `${prefix}ratelimit_rlqs_buckets`;
}

/** The channel on which replicas announce changed buckets. */
export function kvLedgerChannel(prefix: string): string {
  return `${prefix}ratelimit_rlqs_changes`;
}

/**
 * The ledger's commands on the kv store (the layout in the file header); meets
 * `LedgerStorage` (rlqs/ledger-storage.ts). Every method's failure is a redacted copy of the
 * store's error.
 */
export class KvQuotaLedgerCommands extends KvStateClient {
  constructor(options: KvStateClientOptions) {
    super(options, kvLedgerChannel(options.keyPrefix ?? ""));
  }

  /** A bucket's hash (HGETALL). */
  readStreams(bucket: string): Promise<Record<string, string>> {
    return this.command(() =>
      this.client.hgetall(kvLedgerKey(this.prefix, bucket)),
    );
  }

  /** Removes fields of a bucket's hash (one HDEL). */
  async removeStreams(
    bucket: string,
    streams: readonly string[],
  ): Promise<void> {
    await this.command(() =>
      this.client.hdel(kvLedgerKey(this.prefix, bucket), ...streams),
    );
  }

  /**
   * HSET of the stream's field, PEXPIRE of the bucket's hash by `expireMs` (a hash whose
   * every holder is gone expires by itself) and SADD of the bucket to the set, sent together.
   */
  async writeStream(
    bucket: string,
    stream: string,
    json: string,
    expireMs: number,
  ): Promise<void> {
    const key = kvLedgerKey(this.prefix, bucket);
    await Promise.all([
      this.command(() => this.client.hset(key, stream, json)),
      this.command(() => this.client.pexpire(key, expireMs)),
      this.command(() =>
        this.client.sadd(kvLedgerBucketsKey(this.prefix), bucket),
      ),
    ]);
  }

  /**
   * The set's buckets whose hash exists: one SMEMBERS, then one EXISTS per member (sent
   * together), then one SREM of the members whose hash expired.
   */
  async listBuckets(): Promise<string[]> {
    const setKey = kvLedgerBucketsKey(this.prefix);
    const members = await this.command(() => this.client.smembers(setKey));
    const exists = await Promise.all(
      members.map((bucket) =>
        this.command(() =>
          this.client.exists(kvLedgerKey(this.prefix, bucket)),
        ),
      ),
    );
    const gone = members.filter((_, i) => exists[i] === 0);
    if (gone.length > 0)
      await this.command(() => this.client.srem(setKey, ...gone));
    return members.filter((_, i) => exists[i] !== 0);
  }
}

/**
 * Opens the ledger's two connections to an instance (commands, change channel), lazily; their
 * connection errors are counted and logged once by the ledger when a command fails.
 */
export function connectKvQuotaLedgerCommands(
  instance: ResolvedKvInstanceOptions,
  tls: KvTlsOptions | undefined,
  keyPrefix: string,
): KvQuotaLedgerCommands {
  const client = openKvConnection(instance, tls);
  const subscriber = openKvConnection(instance, tls);
  client.on("error", () => undefined);
  subscriber.on("error", () => undefined);
  return new KvQuotaLedgerCommands({
    client,
    subscriber,
    keyPrefix,
    secrets: kvSecrets(instance),
  });
}
