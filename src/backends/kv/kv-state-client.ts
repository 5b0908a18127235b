// The two connections to the main kv instance that a feature keeping shared state beside the
// counters holds (the run-time overrides, the RLQS ledger): one for its commands, one that
// only SUBSCRIBEs to the feature's change channel (a subscribed connection runs nothing else).
// The commands' errors leave redacted (kv-redact.ts); scripts go by EVALSHA with the NOSCRIPT
// retry (kv-scripts.ts); on a cluster each single-key command goes to its key's node.

import type { Cluster, Redis } from "ioredis";
import { redactedError } from "./kv-redact.js";

/** Options of a {@link KvStateClient}. */
export interface KvStateClientOptions {
  /** Connection for the commands (lazy: {@link KvStateClient.connect} connects it). */
  readonly client: Redis | Cluster;
  /** Connection that only SUBSCRIBEs to the change channel. */
  readonly subscriber: Redis | Cluster;
  /** `CACHE_KEY_PREFIX`, before every key and the channel. @defaultValue "" */
  readonly keyPrefix?: string;
  /** Passwords masked in the commands' errors (`kvSecrets`). @defaultValue none */
  readonly secrets?: readonly string[];
}

const noop = (): void => undefined;

/**
 * The connections of one shared-state feature and its change channel; the feature's own
 * commands are its subclass's. Every command's failure is a redacted copy of the store's error
 * (same name, same message unless it held a password).
 */
export abstract class KvStateClient {
  protected readonly client: Redis | Cluster;
  /** `CACHE_KEY_PREFIX`. */
  protected readonly prefix: string;
  private readonly subscriber: Redis | Cluster;
  private readonly channel: string;
  private readonly secrets: readonly string[];

  /** @param channel - the change channel's full name (prefix included) */
  protected constructor(options: KvStateClientOptions, channel: string) {
    this.client = options.client;
    this.subscriber = options.subscriber;
    this.prefix = options.keyPrefix ?? "";
    this.channel = channel;
    this.secrets = options.secrets ?? [];
  }

  /** Starts connecting both connections (those not yet connecting); never throws. */
  connect(): void {
    for (const connection of [this.client, this.subscriber]) {
      if (connection.status === "wait") connection.connect().catch(noop);
    }
  }

  /** Whether the commands' connection is up. */
  get ready(): boolean {
    return this.client.status === "ready";
  }

  /** Calls `listener` once, the next time the commands' connection comes up. */
  onceReady(listener: () => void): void {
    this.client.once("ready", listener);
  }

  /** Whether the change channel's connection is up (not whether it is subscribed yet). */
  get channelReady(): boolean {
    return this.subscriber.status === "ready";
  }

  /** Calls `listener` every time the change channel's connection comes up (and reconnects). */
  onChannelReady(listener: () => void): void {
    this.subscriber.on("ready", listener);
  }

  /** Calls `listener` once, the next time the change channel's connection comes up. */
  onceChannelReady(listener: () => void): void {
    this.subscriber.once("ready", listener);
  }

  /** Calls `listener` with every message on the change channel (other channels are ignored). */
  onAnnouncement(listener: (message: string) => void): void {
    this.subscriber.on("message", (channel: string, message: string) => {
      if (channel === this.channel) listener(message);
    });
  }

  /**
   * SUBSCRIBEs to the change channel (again after a reconnection: a second SUBSCRIBE is
   * harmless).
   *
   * @throws a redacted copy of the store's error
   */
  async listen(): Promise<void> {
    await this.command(() => this.subscriber.subscribe(this.channel));
  }

  /**
   * PUBLISHes `message` on the change channel.
   *
   * @throws a redacted copy of the store's error
   */
  async announce(message: string): Promise<void> {
    await this.command(() => this.client.publish(this.channel, message));
  }

  /** Closes both connections (QUIT, or disconnect when QUIT fails). */
  async close(): Promise<void> {
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

  /**
   * Sends a command now (synchronously: commands sent in one turn leave together) and
   * replaces its failure by a redacted copy.
   */
  protected async command<T>(send: () => Promise<T>): Promise<T> {
    try {
      return await send();
    } catch (err) {
      throw redactedError(err, this.secrets);
    }
  }
}
