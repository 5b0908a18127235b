// Cluster routing of a batch of kv jobs: commands grouped by the node set serving their slot,
// one pipeline per group, replies routed back to their job, MOVED/ASK redirections resent per
// key (upstream `driver_impl.go`), and token-bucket script calls answered NOSCRIPT resent as
// EVAL of the whole script.

import type { ChainableCommander, Cluster } from "ioredis";
import {
  gcraScript,
  gcraScriptArgs,
  gcraScriptSha,
} from "../../limiter/gcra-scripts.js";
import {
  applyBucketReply,
  jobKey,
  jobSize,
  type KvBucketJob,
  type KvJob,
} from "./kv-job.js";
import { keySlot } from "./kv-key-slot.js";
import { decrementScript } from "./kv-scripts.js";

type Reply = [error: Error | null, result: unknown];

/** Where a command's reply goes (cluster: commands are regrouped per node). */
interface CommandRef {
  readonly job: KvJob;
  readonly index: number;
  /**
   * 0 INCRBY (or the clamped decrement script), 1 EXPIRE, 2 GET, 3 GET of the previous
   * window's key, 4 the token-bucket script
   */
  readonly op: 0 | 1 | 2 | 3 | 4;
}

function isRedirect(err: Error): boolean {
  return err.message.startsWith("MOVED ") || err.message.startsWith("ASK ");
}

/**
 * Whether a failed command is sent again in the second round: redirected, or a token-bucket
 * `EVALSHA` the node does not have the script for (scripts are not loaded on cluster nodes
 * ahead; the `EVAL` of the second round caches it on that node).
 */
function isResent(ref: CommandRef, err: Error): boolean {
  return (
    isRedirect(err) || (ref.op === 4 && err.message.startsWith("NOSCRIPT"))
  );
}

function applyReply(ref: CommandRef, value: unknown): void {
  const job = ref.job;
  if (job.kind === "gcra") {
    applyBucketReply(job, ref.index, value);
  } else if (job.kind === "get") {
    job.results[ref.index] =
      value === null || value === undefined ? 0 : Number(value);
  } else if (ref.op === 0) {
    job.slots[ref.index]!.current = Number(value);
  } else if (ref.op === 3) {
    job.slots[ref.index]!.previous =
      value === null || value === undefined ? 0 : Number(value);
  }
}

/** The key a command reference is about. */
function refKey(ref: CommandRef): string {
  const job = ref.job;
  return ref.op === 3 && job.kind === "incr"
    ? job.slots[ref.index]!.previousCacheKey!
    : jobKey(job, ref.index);
}

/** The token-bucket script call of a job's `index`-th slot, by SHA or (`full`) by text. */
function addBucketCommand(
  pipeline: ChainableCommander,
  job: KvBucketJob,
  index: number,
  full: boolean,
): void {
  const slot = job.slots[index]!;
  const args = gcraScriptArgs(job.nowUs, slot.increment, slot.tokenBucket!);
  if (full) pipeline.eval(gcraScript, 1, slot.cacheKey, ...args);
  else pipeline.evalsha(gcraScriptSha, 1, slot.cacheKey, ...args);
}

function addCommands(
  pipeline: ChainableCommander,
  refs: CommandRef[],
  job: KvJob,
  index: number,
): void {
  if (job.kind === "get") {
    pipeline.get(job.cacheKeys[index]!);
    refs.push({ job, index, op: 2 });
    return;
  }
  if (job.kind === "gcra") {
    addBucketCommand(pipeline, job, index, false);
    refs.push({ job, index, op: 4 });
    return;
  }
  const slot = job.slots[index]!;
  writeCounter(pipeline, slot.cacheKey, slot.increment);
  refs.push({ job, index, op: 0 });
  // A negative increment (a refund, an undo) never creates the key: no EXPIRE.
  if (slot.increment < 0) return;
  pipeline.expire(slot.cacheKey, slot.expirationSeconds);
  refs.push({ job, index, op: 1 });
}

/**
 * INCRBY of `increment`, or for a negative one the clamped decrement script (never below 0,
 * never creating the key); its reply is the counter after it.
 */
function writeCounter(
  pipeline: ChainableCommander,
  cacheKey: string,
  increment: number,
): void {
  if (increment < 0) pipeline.eval(decrementScript, 1, cacheKey, -increment);
  else pipeline.incrby(cacheKey, increment);
}

/** Executes one pipeline and routes each reply; collects the refs that got a redirect. */
async function execPipeline(
  pipeline: ChainableCommander,
  refs: readonly CommandRef[],
  redirects?: CommandRef[],
): Promise<void> {
  let replies: Reply[] | null;
  try {
    replies = await pipeline.exec();
  } catch (err) {
    for (const ref of refs) ref.job.failure ??= err;
    return;
  }
  if (replies === null) {
    for (const ref of refs)
      ref.job.failure ??= new Error("pipeline returned no replies");
    return;
  }
  for (let j = 0; j < refs.length; j++) {
    const ref = refs[j]!;
    const reply = replies[j];
    if (reply === undefined) {
      ref.job.failure ??= new Error("pipeline reply missing");
    } else if (reply[0] !== null) {
      if (redirects !== undefined && isResent(ref, reply[0]))
        redirects.push(ref);
      else ref.job.failure ??= reply[0];
    } else applyReply(ref, reply[1]);
  }
}

/**
 * Runs a batch of jobs on a cluster: commands are grouped by the node set serving their slot
 * (INCRBY and EXPIRE of a key stay together), one pipeline per node, run with `parallelism`
 * pipelines in flight (`KV_CLUSTER_PIPELINE_PARALLELISM`, upstream `driver_impl.go`). Commands answered
 * MOVED or ASK (resharding) are sent again per key; ioredis then follows the redirection and
 * refreshes its slot map; so are token-bucket calls answered NOSCRIPT, as `EVAL` (as are
 * redirected ones, whose new node may lack the script). Never rejects for a failed command:
 * each failure is recorded in its job's `failure` (the first one wins).
 *
 * @param parallelism - pipelines in flight at once, ≥ 1
 */
export async function executeOnCluster(
  cluster: Cluster,
  jobs: readonly KvJob[],
  parallelism: number,
): Promise<void> {
  const groups = new Map<
    string,
    { pipeline: ChainableCommander; refs: CommandRef[] }
  >();
  for (const job of jobs) {
    const size = jobSize(job);
    for (let i = 0; i < size; i++) {
      const nodes = cluster.slots[keySlot(jobKey(job, i))];
      const groupKey = nodes === undefined ? "" : nodes.join(",");
      let group = groups.get(groupKey);
      if (group === undefined) {
        group = { pipeline: cluster.pipeline(), refs: [] };
        groups.set(groupKey, group);
      }
      addCommands(group.pipeline, group.refs, job, i);
    }
    // Sliding windows: GET of the previous window's key, grouped by its own slot.
    if (job.kind !== "incr" || !job.readPrevious) continue;
    for (let i = 0; i < job.slots.length; i++) {
      const previousKey = job.slots[i]!.previousCacheKey;
      if (previousKey === undefined) continue;
      const nodes = cluster.slots[keySlot(previousKey)];
      const groupKey = nodes === undefined ? "" : nodes.join(",");
      let group = groups.get(groupKey);
      if (group === undefined) {
        group = { pipeline: cluster.pipeline(), refs: [] };
        groups.set(groupKey, group);
      }
      group.pipeline.get(previousKey);
      group.refs.push({ job, index: i, op: 3 });
    }
  }
  const redirects: CommandRef[] = [];
  const pending = [...groups.values()];
  const worker = async (): Promise<void> => {
    for (let group = pending.shift(); group; group = pending.shift()) {
      await execPipeline(group.pipeline, group.refs, redirects);
    }
  };
  const inFlight = Math.min(parallelism, pending.length);
  await Promise.all(Array.from({ length: inFlight }, worker));
  if (redirects.length === 0) return;
  // Commands of one key go in one pipeline: they all get the same redirection, which
  // ioredis follows for a whole pipeline. (A key's NOSCRIPT and redirected calls go together
  // too, in their original order.)
  const byKey = new Map<string, CommandRef[]>();
  for (const ref of redirects) {
    const cacheKey = refKey(ref);
    const refs = byKey.get(cacheKey);
    if (refs === undefined) byKey.set(cacheKey, [ref]);
    else refs.push(ref);
  }
  await Promise.all(
    [...byKey].map(([cacheKey, refs]) => {
      const pipeline = cluster.pipeline();
      for (const ref of refs) {
        const job = ref.job;
        if (job.kind === "gcra")
          addBucketCommand(pipeline, job, ref.index, true);
        else if (job.kind === "incr" && ref.op === 0)
          writeCounter(pipeline, cacheKey, job.slots[ref.index]!.increment);
        else if (job.kind === "incr" && ref.op === 1)
          pipeline.expire(cacheKey, job.slots[ref.index]!.expirationSeconds);
        else pipeline.get(cacheKey);
      }
      return execPipeline(pipeline, refs);
    }),
  );
}
