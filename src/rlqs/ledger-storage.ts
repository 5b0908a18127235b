// The shared storage under the kv ledger (kv-quota-ledger.ts): what the ledger needs of it, in
// the quota service's words. app/ passes the kv store's implementation
// (backends/kv/kv-quota-ledger-commands.ts), which meets this interface structurally: rlqs/
// never imports backends/.

/**
 * Per bucket (its ledger key) a map of stream id → the stream's stored field (JSON) that
 * expires as a whole when nobody writes it, the list of the buckets with such a map, and a
 * change channel between the replicas. Every command rejects with the store's (redacted)
 * error when the store fails; the listeners never throw.
 */
export interface LedgerStorage {
  /** Starts connecting (the commands and the change channel); never throws. */
  connect(): void;
  /** Whether the change channel's connection is up. */
  readonly channelReady: boolean;
  /** Calls `listener` every time the change channel's connection comes up. */
  onChannelReady(listener: () => void): void;
  /** Calls `listener` once, the next time the change channel's connection comes up. */
  onceChannelReady(listener: () => void): void;
  /** Calls `listener` with every message announced on the change channel (ours too). */
  onAnnouncement(listener: (message: string) => void): void;
  /** Subscribes to the change channel (again after each reconnection). */
  listen(): Promise<void>;
  /** Announces `message` on the change channel. */
  announce(message: string): Promise<void>;
  /** Closes the connections. */
  close(): Promise<void>;

  /** Every stream's stored field of a bucket, by stream id, in the store's order. */
  readStreams(bucket: string): Promise<Record<string, string>>;
  /** Removes streams' fields from a bucket. */
  removeStreams(bucket: string, streams: readonly string[]): Promise<void>;
  /**
   * Writes one stream's field, lists the bucket, and sets the bucket to expire `expireMs`
   * after this write unless written again.
   */
  writeStream(
    bucket: string,
    stream: string,
    json: string,
    expireMs: number,
  ): Promise<void>;
  /** The listed buckets that still have fields; unlists the ones that expired. */
  listBuckets(): Promise<string[]>;
}
