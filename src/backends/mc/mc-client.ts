import type { Logger } from "pino";
import { crc32 } from "node:zlib";
import { BackendError } from "../../limiter/backend-error.js";
import type { Counter, StatsStore } from "../../stats/stats-store.js";
import {
  McConnection,
  McReplyError,
  McSilenceError,
  type McCasValue,
  type McDecrement,
  type McIncrement,
  type McStoreOutcome,
} from "./mc-connection.js";
import {
  nodesFromSrv,
  type McNodeAddress,
  type ResolvedMcBackendOptions,
} from "./mc-options.js";

/**
 * Returns the index of the node that holds `cacheKey` in an ordered list of `nodeCount`
 * nodes: the CRC-32 (IEEE) checksum of the key's UTF-8 bytes modulo the node count, 0 for a
 * single node. Same function as upstream's client (gomemcache `ServerList.PickServer`), so
 * every instance, in either implementation, given the same ordered list picks the same node.
 * Changing the number of nodes moves most keys to another node (see {@link movedKeysRatio}).
 *
 * @param nodeCount - number of nodes, ≥ 1
 */
export function nodeIndexForKey(cacheKey: string, nodeCount: number): number {
  return nodeCount <= 1 ? 0 : crc32(cacheKey) % nodeCount;
}

/**
 * Returns the share of keys (0–1) that {@link nodeIndexForKey} places on a different node after
 * the ordered list changes from `before` to `after`, assuming uniformly spread checksums; 1
 * when either list is empty.
 */
export function movedKeysRatio(
  before: readonly string[],
  after: readonly string[],
): number {
  if (before.length === 0 || after.length === 0) return 1;
  // Residues modulo lcm(before, after) repeat the whole mapping pattern.
  const gcd = (a: number, b: number): number => (b === 0 ? a : gcd(b, a % b));
  const period =
    (before.length * after.length) / gcd(before.length, after.length);
  let moved = 0;
  for (let r = 0; r < period; r++) {
    if (before[r % before.length] !== after[r % after.length]) moved++;
  }
  return moved / period;
}

/** Counters of the backend's memcached operations (upstream scope `ratelimit.memcache`). */
export interface McStats {
  /** `ratelimit.mc.multiget.__code=success`: multi-gets every node answered. */
  readonly multigetSuccess: Counter;
  /** `ratelimit.mc.multiget.__code=error`: multi-gets some node failed (those keys read 0). */
  readonly multigetError: Counter;
  /** `ratelimit.mc.increment.__code=success`: counter increments (or creations) applied. */
  readonly incrementSuccess: Counter;
  /** `ratelimit.mc.increment.__code=error`: counter increments that failed. */
  readonly incrementError: Counter;
  /** `ratelimit.mc.keys_requested`: keys asked for in multi-gets. */
  readonly keysRequested: Counter;
  /** `ratelimit.mc.keys_found`: keys that existed. */
  readonly keysFound: Counter;
}

/**
 * Names of the `ratelimit.mc.*` counters: upstream's `ratelimit.memcache.*` with the neutral
 * word, its `code` tag written the way its statsd sink serializes tags (`.__code=<value>`).
 * Upstream's `increment.__code=miss` and `add.__code=*` do not occur: a missing counter is
 * created by the increment itself (see {@link McConnection.incrementMultiValues}).
 */
export const mcStatNames = {
  multigetSuccess: "ratelimit.mc.multiget.__code=success",
  multigetError: "ratelimit.mc.multiget.__code=error",
  incrementSuccess: "ratelimit.mc.increment.__code=success",
  incrementError: "ratelimit.mc.increment.__code=error",
  keysRequested: "ratelimit.mc.keys_requested",
  keysFound: "ratelimit.mc.keys_found",
} as const;

/** Allocates the {@link McStats} counters in `store`. */
export function createMcStats(store: StatsStore): McStats {
  return {
    multigetSuccess: store.counter(mcStatNames.multigetSuccess),
    multigetError: store.counter(mcStatNames.multigetError),
    incrementSuccess: store.counter(mcStatNames.incrementSuccess),
    incrementError: store.counter(mcStatNames.incrementError),
    keysRequested: store.counter(mcStatNames.keysRequested),
    keysFound: store.counter(mcStatNames.keysFound),
  };
}

/** One node of the current list with its connections. */
interface McNode {
  readonly address: string;
  readonly connections: readonly McConnection[];
  /** Round-robin position in {@link connections}, for probes. */
  next: number;
  /** Whether its last operation or probe succeeded; undefined before the first. */
  reachable: boolean | undefined;
}

/** Items of one request that go over one connection. */
interface Batch<T> {
  readonly node: McNode;
  readonly connection: McConnection;
  readonly items: T[];
}

/**
 * The memcached node list and its connections: a static list (`MC_HOST_PORT`) or one resolved
 * from an SRV record (`MC_SRV`) and re-resolved every `MC_SRV_REFRESH`; maps each key to its
 * node with {@link nodeIndexForKey}; runs multi-gets and increments, one batch per connection
 * in parallel (a key always uses the same connection of its node); fails open per node (a
 * failing node's keys read as missing), counting {@link McStats} and logging when a node
 * stops or starts answering; reports the `backend` health component, healthy while at least
 * one node answers (probed every `healthCheckIntervalMs`). Parity: upstream
 * `src/memcached/` (client and `cache_impl.go`) and `src/srv/srv.go`.
 */
export class McClient {
  private readonly options: ResolvedMcBackendOptions;
  private readonly logger: Logger;
  private readonly stats: McStats;
  private nodes: readonly McNode[] = [];
  private readonly retiring = new Set<Promise<void>>();
  private healthy: boolean | undefined;
  private probing: Promise<void> | undefined;
  private refreshing: Promise<void> | undefined;
  private probeTimer: NodeJS.Timeout | undefined;
  private refreshTimer: NodeJS.Timeout | undefined;
  private closing: Promise<void> | undefined;

  constructor(options: ResolvedMcBackendOptions, stats: McStats) {
    this.options = options;
    this.logger = options.logger;
    this.stats = stats;
    options.health?.register("backend", false);
    if (options.nodes.length > 0) this.setNodes(options.nodes);
  }

  /** The ordered node list in force (`host:port`, or `target.:port` from SRV). */
  get addresses(): string[] {
    return this.nodes.map((node) => node.address);
  }

  /**
   * Resolves the SRV record (when configured), probes every node once to set the health, and
   * starts the probe and SRV refresh timers. Does not wait for a node to answer: with none
   * reachable the backend starts unhealthy and fails open until one answers.
   *
   * @throws {@link BackendError} when the initial SRV lookup fails or finds no records (as
   *   upstream, which refuses to start)
   */
  async start(): Promise<void> {
    const { srv, srvRefreshMs, healthCheckIntervalMs } = this.options;
    if (srv !== "") {
      try {
        this.setNodes(await this.resolveSrv());
      } catch (err) {
        throw new BackendError(
          "mc",
          `cannot resolve the memcached nodes from the SRV record ${srv} (MC_SRV): ${errorMessage(err)}`,
          { cause: err },
        );
      }
    }
    await this.probe();
    this.logger.info(
      { nodes: this.addresses, healthy: this.healthy },
      "memcached nodes",
    );
    this.probeTimer = setInterval(() => {
      void this.probe();
    }, healthCheckIntervalMs);
    this.probeTimer.unref();
    if (srv !== "" && srvRefreshMs > 0) {
      this.logger.info(
        { srv, refreshMs: srvRefreshMs },
        "refreshing memcached nodes periodically",
      );
      this.refreshTimer = setInterval(() => {
        void this.refreshNodes();
      }, srvRefreshMs);
      this.refreshTimer.unref();
    }
  }

  /**
   * Reads `keys` with one multi-get per connection in use, in parallel (one per node with a
   * single connection per node). Never rejects: keys of a node that
   * fails (and all keys when there is no node) are simply absent, as upstream's fail-open.
   *
   * @returns the raw values of the keys found
   */
  getMulti(keys: readonly string[]): Promise<Map<string, Buffer>> {
    const stats = this.stats;
    stats.keysRequested.add(keys.length);
    const batches = this.batchByConnection(keys, (key) => key);
    if (batches === undefined) {
      stats.multigetError.add(1);
      if (!this.options.failOpen)
        return Promise.reject(new BackendError("mc", "no memcached node"));
      return Promise.resolve(new Map<string, Buffer>());
    }
    return new Promise((resolve, reject) => {
      let remaining = batches.length;
      let failed = false;
      let found: Map<string, Buffer> | undefined;
      for (const { node, connection, items } of batches) {
        connection.getMulti(items, (err, values) => {
          if (err !== undefined) {
            failed = true;
            this.nodeFailed(node, err, "multiget");
          } else {
            this.nodeAnswered(node);
            if (found === undefined) found = values;
            else for (const [key, value] of values) found.set(key, value);
          }
          if (--remaining > 0) return;
          (failed ? stats.multigetError : stats.multigetSuccess).add(1);
          if (failed && !this.options.failOpen) {
            reject(new BackendError("mc", "memcached multi-get failed"));
            return;
          }
          const result = found ?? new Map<string, Buffer>();
          stats.keysFound.add(result.size);
          resolve(result);
        });
      }
    });
  }

  /**
   * Adds each increment's hits to its counter (a missing counter is created with the hits
   * and the increment's expiration, atomically on the server), waiting for the counters'
   * values after them: one batch per connection in use, in parallel. Counts each increment in
   * `ratelimit.mc.increment.*`. The failures are counted and logged; with `failOpen` (the default) they fail
   * open and the call never rejects.
   *
   * @param failOpen - false: reject when a node fails (connection error, timeout, reply
   *   mismatch) or there is no node; a node's error status (a non-numeric counter) still only
   *   leaves that value undefined
   * @returns parallel to `increments`: each counter's value after its increment, or undefined
   *   where it failed (node down, non-numeric value, no node)
   * @throws {@link BackendError} (rejects) as `failOpen` says
   */
  incrementMultiValues(
    increments: readonly McIncrement[],
    failOpen = true,
  ): Promise<(number | undefined)[]> {
    const stats = this.stats;
    const values = new Array<number | undefined>(increments.length);
    const batches = this.batchByConnection(
      increments.map((_, index) => index),
      (index) => increments[index]!.key,
    );
    if (batches === undefined) {
      stats.incrementError.add(increments.length);
      if (!failOpen)
        return Promise.reject(new BackendError("mc", "no memcached node"));
      return Promise.resolve(values);
    }
    return new Promise((resolve, reject) => {
      let remaining = batches.length;
      let nodeFailure: Error | undefined;
      // Whether a node failed other than by silence (it may not have applied its increments).
      let notApplied = false;
      for (const { node, connection, items } of batches) {
        connection.incrementMultiValues(
          items.map((index) => increments[index]!),
          (err, after) => {
            let failed = 0;
            for (let j = 0; j < items.length; j++) {
              const value = after[j];
              if (value === undefined) failed++;
              values[items[j]!] = value;
            }
            if (err !== undefined && !(err instanceof McReplyError)) {
              nodeFailure ??= err;
              if (!(err instanceof McSilenceError)) notApplied = true;
            }
            this.incrementsDone(node, items.length, failed, err);
            if (--remaining > 0) return;
            if (nodeFailure !== undefined && !failOpen) {
              reject(
                new BackendError(
                  "mc",
                  `memcached increment failed: ${nodeFailure.message}`,
                  {
                    cause: nodeFailure,
                    unanswered: !notApplied,
                  },
                ),
              );
              return;
            }
            resolve(values);
          },
        );
      }
    });
  }

  /**
   * Subtracts each decrement's hits from its counter (never creating one), one batch per
   * connection in use, in parallel. Never rejects: failures are logged (the counter then
   * keeps the hits until its window ends).
   */
  decrementMulti(decrements: readonly McDecrement[]): Promise<void> {
    const batches = this.batchByConnection(
      decrements,
      (decrement) => decrement.key,
    );
    if (batches === undefined) return Promise.resolve();
    return new Promise((resolve) => {
      let remaining = batches.length;
      for (const { node, connection, items } of batches) {
        connection.decrementMulti(items, (err, failed) => {
          if (failed === items.length && err !== undefined) {
            this.nodeFailed(node, err, "decrement");
          } else {
            this.nodeAnswered(node);
            if (err !== undefined) {
              this.logger.warn(
                { err, node: node.address, failed },
                "memcached rejected compensating counter decrements",
              );
            }
          }
          if (--remaining === 0) resolve();
        });
      }
    });
  }

  /**
   * Reads one key with its CAS token from its node (the connection its multi-gets use), for
   * a compare-and-swap loop. Unlike the counters' reads, never fails open.
   *
   * @returns the value and token, or undefined when the key is missing
   * @throws {@link BackendError} when there is no node, the node fails, or its reply is not
   *   usable (an error status, no CAS token: see {@link McConnection.gets})
   */
  gets(key: string): Promise<McCasValue | undefined> {
    return this.single(key, "gets", (connection, done) => {
      connection.gets(key, done);
    });
  }

  /**
   * Stores `value` at `key` if the item still has the token `cas` (see
   * {@link McConnection.cas}); `expiration` as `toMcExpiration` returns it.
   *
   * @returns whether it was stored (false: another writer changed or removed the item)
   * @throws {@link BackendError} as {@link gets}
   */
  async cas(
    key: string,
    value: string,
    expiration: number,
    cas: bigint,
  ): Promise<boolean> {
    const outcome = await this.single<McStoreOutcome>(
      key,
      "cas",
      (connection, done) => {
        connection.cas(key, value, expiration, cas, done);
      },
    );
    return outcome === "stored";
  }

  /**
   * Stores `value` at `key` if the key is missing (see {@link McConnection.add});
   * `expiration` as `toMcExpiration` returns it.
   *
   * @returns whether it was stored (false: another writer created the key first)
   * @throws {@link BackendError} as {@link gets}
   */
  async add(key: string, value: string, expiration: number): Promise<boolean> {
    const outcome = await this.single<McStoreOutcome>(
      key,
      "add",
      (connection, done) => {
        connection.add(key, value, expiration, done);
      },
    );
    return outcome === "stored";
  }

  /**
   * Sends a NOOP to every node and updates reachability and health; concurrent calls share
   * one round.
   */
  probe(): Promise<void> {
    this.probing ??= Promise.all(
      this.nodes.map(
        (node) =>
          new Promise<void>((resolve) => {
            this.nextConnection(node).noop((err) => {
              if (err === undefined) this.nodeAnswered(node);
              else this.nodeFailed(node, err, "probe");
              resolve();
            });
          }),
      ),
    ).then(() => {
      this.probing = undefined;
      this.updateHealth();
    });
    return this.probing;
  }

  /**
   * Re-resolves the SRV record and switches to the new list when it differs; on failure the
   * current list stays (logged). Concurrent calls share one lookup.
   */
  refreshNodes(): Promise<void> {
    this.refreshing ??= (async () => {
      try {
        const next = await this.resolveSrv();
        if (this.closing !== undefined) return;
        const before = this.addresses;
        if (
          next.length === before.length &&
          next.every((node, i) => node.address === before[i])
        ) {
          return;
        }
        this.setNodes(next);
        await this.probe();
      } catch (err) {
        this.logger.warn(
          { err, srv: this.options.srv, nodes: this.addresses },
          "failed to refresh memcached nodes; keeping the current list",
        );
      } finally {
        this.refreshing = undefined;
      }
    })();
    return this.refreshing;
  }

  /**
   * Stops the timers and closes every connection, letting pending operations finish (up to
   * the operation timeout); idempotent.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      clearInterval(this.probeTimer);
      clearInterval(this.refreshTimer);
      await this.refreshing;
      const timeoutMs = this.options.timeoutMs;
      await Promise.all([
        ...this.nodes.flatMap((node) =>
          node.connections.map((c) => c.shutdown(timeoutMs)),
        ),
        ...this.retiring,
      ]);
    })();
    return this.closing;
  }

  private async resolveSrv(): Promise<McNodeAddress[]> {
    const answers = await this.options.srvResolver.resolveSrv(this.options.srv);
    if (answers.length === 0) throw new Error("the record has no targets");
    return nodesFromSrv(answers);
  }

  /** Switches to a new ordered list, keeping the connections of nodes still in it. */
  private setNodes(addresses: readonly McNodeAddress[]): void {
    const { connectionsPerNode, timeoutMs, connectTimeoutMs, tls } =
      this.options;
    const previous = new Map(this.nodes.map((node) => [node.address, node]));
    const beforeList = this.addresses;
    const nodes = addresses.map((address): McNode => {
      const kept = previous.get(address.address);
      if (kept !== undefined) {
        previous.delete(address.address);
        return kept;
      }
      const connections: McConnection[] = [];
      for (let i = 0; i < connectionsPerNode; i++) {
        connections.push(
          new McConnection(address, { timeoutMs, connectTimeoutMs, tls }),
        );
      }
      return {
        address: address.address,
        connections,
        next: 0,
        reachable: undefined,
      };
    });
    this.nodes = nodes;
    for (const node of previous.values()) {
      for (const connection of node.connections) {
        const retired = connection.shutdown(timeoutMs).finally(() => {
          this.retiring.delete(retired);
        });
        this.retiring.add(retired);
      }
    }
    if (beforeList.length === 0) return;
    const afterList = this.addresses;
    const added = afterList.filter((a) => !beforeList.includes(a));
    const removed = beforeList.filter((a) => !afterList.includes(a));
    this.logger.info(
      {
        nodes: afterList,
        added,
        removed,
        changedNodes: added.length + removed.length,
        movedKeysPercent:
          Math.round(movedKeysRatio(beforeList, afterList) * 1000) / 10,
      },
      "memcached node list changed",
    );
    this.updateHealth();
  }

  /**
   * Groups items by the connection their key uses; undefined when there is no node. A key
   * always uses the same connection of its node, so this instance's increments of a key and
   * its later reads of that key reach memcached in order.
   */
  private batchByConnection<T>(
    items: readonly T[],
    keyOf: (item: T) => string,
  ): Batch<T>[] | undefined {
    const nodes = this.nodes;
    const nodeCount = nodes.length;
    if (nodeCount === 0) return undefined;
    const perNode = this.options.connectionsPerNode;
    if (nodeCount === 1 && perNode === 1) {
      const node = nodes[0]!;
      return [{ node, connection: node.connections[0]!, items: [...items] }];
    }
    const batches = new Map<number, Batch<T>>();
    for (const item of items) {
      const checksum = crc32(keyOf(item));
      const nodeIndex = checksum % nodeCount;
      // The quotient left by the node choice picks the connection, independently of it.
      const slot =
        nodeIndex * perNode + (Math.floor(checksum / nodeCount) % perNode);
      const batch = batches.get(slot);
      if (batch !== undefined) {
        batch.items.push(item);
      } else {
        const node = nodes[nodeIndex]!;
        const connection = node.connections[slot % perNode]!;
        batches.set(slot, { node, connection, items: [item] });
      }
    }
    return [...batches.values()];
  }

  /**
   * Runs one single-key operation on the connection {@link batchByConnection} picks for `key`
   * (same node and connection, so it stays ordered with this instance's other commands on the
   * key); a connection failure marks the node failed, an unusable reply does not.
   */
  private single<T>(
    key: string,
    operation: string,
    run: (
      connection: McConnection,
      done: (err: Error | undefined, result: T | undefined) => void,
    ) => void,
  ): Promise<T | undefined> {
    const nodes = this.nodes;
    const nodeCount = nodes.length;
    if (nodeCount === 0)
      return Promise.reject(new BackendError("mc", "no memcached node"));
    const perNode = this.options.connectionsPerNode;
    let node: McNode;
    let connection: McConnection;
    if (nodeCount === 1 && perNode === 1) {
      node = nodes[0]!;
      connection = node.connections[0]!;
    } else {
      // The same arithmetic as batchByConnection.
      const checksum = crc32(key);
      const nodeIndex = checksum % nodeCount;
      node = nodes[nodeIndex]!;
      connection =
        node.connections[Math.floor(checksum / nodeCount) % perNode]!;
    }
    return new Promise((resolve, reject) => {
      run(connection, (err, result) => {
        if (err === undefined) {
          this.nodeAnswered(node);
          resolve(result);
          return;
        }
        if (err instanceof McReplyError) this.nodeAnswered(node);
        else this.nodeFailed(node, err, operation);
        reject(
          new BackendError(
            "mc",
            `memcached ${operation} of ${key} on ${node.address} failed: ${err.message}`,
            { cause: err },
          ),
        );
      });
    });
  }

  /** Counts a node's answer to `sent` increments and logs its failures. */
  private incrementsDone(
    node: McNode,
    sent: number,
    failed: number,
    err: Error | undefined,
  ): void {
    const stats = this.stats;
    stats.incrementSuccess.add(sent - failed);
    stats.incrementError.add(failed);
    if (failed === sent && err !== undefined) {
      this.nodeFailed(node, err, "increment");
    } else {
      this.nodeAnswered(node);
      if (err !== undefined) {
        this.logger.warn(
          { err, node: node.address, failed },
          "memcached rejected counter increments",
        );
      }
    }
  }

  /** The next connection of `node` in round-robin order (for probes). */
  private nextConnection(node: McNode): McConnection {
    const connections = node.connections;
    const connection = connections[node.next]!;
    node.next = (node.next + 1) % connections.length;
    return connection;
  }

  private nodeAnswered(node: McNode): void {
    if (node.reachable === true) return;
    if (node.reachable === false) {
      this.logger.info({ node: node.address }, "memcached node answers again");
    }
    node.reachable = true;
    this.updateHealth();
  }

  /**
   * Records a failed operation. The transition to unreachable is logged as an error; further
   * failures of the same node only at debug level (they are counted in {@link McStats}).
   */
  private nodeFailed(node: McNode, err: Error, operation: string): void {
    if (node.reachable === false) {
      this.logger.debug(
        { err, node: node.address, operation },
        "memcached node still failing; its keys fail open",
      );
      return;
    }
    node.reachable = false;
    this.logger.error(
      { err, node: node.address, operation },
      "memcached node failed; its keys fail open until it answers",
    );
    this.updateHealth();
  }

  private updateHealth(): void {
    const healthy = this.nodes.some((node) => node.reachable === true);
    if (healthy === this.healthy) return;
    this.healthy = healthy;
    const health = this.options.health;
    if (healthy) health?.ok("backend");
    else health?.fail("backend");
    if (healthy) this.logger.info("memcached backend healthy: a node answers");
    else this.logger.warn("memcached backend unhealthy: no node answers");
  }
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
