/**
 * The store side of `algorithm: token_bucket`: one atomic operation per decision that applies
 * {@link gcraDecide} to the TAT stored at one cache key. kv (Redis protocol) runs
 * {@link gcraScript}, which the store runs alone; mc (memcached protocol) has no scripts, so it
 * loops on compare-and-swap around {@link gcraCasStep}; memory calls {@link gcraDecide}
 * directly. The stored value is the TAT as a decimal integer of µs since the Unix epoch, so a
 * key written by any backend reads the same on the others.
 *
 * **Whose clock.** The caller's (`nowUs` in the arguments), not the store's `TIME`: fixed and
 * sliding windows already use the caller's clock, so every algorithm of one request agrees on
 * "now"; Explain predicts with the caller's clock; mc has no clock to ask, and memory none but
 * ours; and tests can drive the same sequence through every backend with a fake clock. The
 * price is that replicas must keep their clocks close (NTP): one ahead by δ µs may admit up
 * to `ceil(δ / T)` hits more than the bound, one behind refuses a little more. The store's
 * clock is not needed for expiry either: the lifetime is sent relative (`PX`).
 */
import { createHash } from "node:crypto";
import {
  gcraDecide,
  gcraOutcome,
  type GcraDecision,
  type GcraParams,
} from "./gcra.js";

/**
 * The kv script of one token-bucket decision. KEYS[1]: the bucket's cache key. ARGV (see
 * {@link gcraScriptArgs}): now µs, hits, emission interval T µs, capacity C µs, burst, all
 * decimal integers. Reads the TAT (absent or unreadable: a full bucket), decides as
 * {@link gcraDecide}, and when the TAT changes stores it with `SET key tat PX ceil((tat −
 * now) / 1000)` (or `DEL`s the key when the TAT is now, a full bucket). Replies `[allowed
 * (0|1), TAT after the decision, written (0|1)]`. Numbers are Lua 5.1 doubles, exact below 2⁵³
 * (see gcra.ts); they are written with `%.0f`, because Lua's default number format keeps only
 * 14 digits.
 */
export const gcraScript = `
local now = tonumber(ARGV[1])
local hits = tonumber(ARGV[2])
local interval = tonumber(ARGV[3])
local capacity = tonumber(ARGV[4])
local tat = tonumber(redis.call('GET', KEYS[1]) or '')
if tat == nil or tat < now then tat = now end
local function store(new)
  if new > now then
    redis.call('SET', KEYS[1], string.format('%.0f', new), 'PX',
      string.format('%.0f', math.ceil((new - now) / 1000)))
  else
    redis.call('DEL', KEYS[1])
  end
  return {1, new, 1}
end
if hits > 0 then
  if hits <= tonumber(ARGV[5]) then
    local new = tat + hits * interval
    if new - now <= capacity then return store(new) end
  end
  return {0, tat, 0}
end
if hits < 0 and tat > now then
  local back = -hits * interval
  if back >= tat - now then return store(now) end
  return store(tat - back)
end
if hits < 0 or tat - now <= capacity then return {1, tat, 0} end
return {0, tat, 0}
`;

/** SHA-1 of {@link gcraScript}, hex: the `EVALSHA` handle. */
export const gcraScriptSha = createHash("sha1")
  .update(gcraScript)
  .digest("hex");

/**
 * Returns the ARGV of {@link gcraScript}: `[nowUs, hits, T, C, burst]` as decimal strings.
 *
 * @param nowUs - the request time, integer µs since the Unix epoch (`clock.nowMs() × 1000`)
 * @param hits - the hits addend: > 0 to take, 0 to check, < 0 to refund; an integer
 */
export function gcraScriptArgs(
  nowUs: number,
  hits: number,
  params: GcraParams,
): [string, string, string, string, string] {
  return [
    String(nowUs),
    String(hits),
    String(params.emissionIntervalUs),
    String(params.capacityUs),
    String(params.burst),
  ];
}

/**
 * Turns the reply of {@link gcraScript} (as numbers) into the decision {@link gcraDecide}
 * would have returned for the same stored TAT, `nowUs`, `hits` and params.
 *
 * @throws RangeError when the reply is not `[0|1, integer TAT ≥ nowUs, 0|1]` (the kv backend
 *   turns it into a `BackendError`)
 */
export function gcraDecisionFromReply(
  reply: readonly number[],
  nowUs: number,
  hits: number,
  params: GcraParams,
): GcraDecision {
  const [allowed, tatUs, written] = reply;
  if (
    reply.length !== 3 ||
    (allowed !== 0 && allowed !== 1) ||
    (written !== 0 && written !== 1) ||
    tatUs === undefined ||
    !Number.isSafeInteger(tatUs) ||
    tatUs < nowUs
  ) {
    throw new RangeError(
      `unexpected token bucket script reply [${reply.join(", ")}]`,
    );
  }
  return gcraOutcome(
    allowed === 1,
    tatUs,
    written === 1 ? tatUs : undefined,
    nowUs,
    hits,
    params,
  );
}

/** One step of the mc compare-and-swap loop (see {@link gcraCasStep}). */
export interface GcraCasStep {
  /** The answer, valid once {@link GcraCasStep.write} is stored (or at once when undefined). */
  readonly decision: GcraDecision;
  /** The value to store (the new TAT, µs), or undefined when nothing is to be written. */
  readonly write: bigint | undefined;
  /**
   * Lifetime of the written value, whole seconds ≥ 1: `ceil((TAT − now) / 10⁶) + 1` (0 when
   * nothing is written). The extra second covers memcached's one-second clock, which may
   * expire an item up to a second early. Relative: values over 30 days must be sent as a Unix
   * time (`toMcExpiration`).
   */
  readonly expirationSeconds: number;
}

/**
 * Computes what the mc backend stores for one token-bucket decision, given the value it read.
 * memcached cannot run the decision itself, so the backend loops:
 *
 * 1. `GET` the key, keeping the CAS token of the reply; a miss is `stored = undefined`.
 * 2. `step = gcraCasStep(stored, nowUs, hits, params)`, with the request's `nowUs` on every
 *    attempt (the request has one time).
 * 3. `step.write` undefined (refused, a check, a refund on a full bucket): answer
 *    `step.decision`; nothing is written.
 * 4. Otherwise, after a miss `ADD` the value (fails if another request created the key), else
 *    `SET` it with the CAS token (fails if the key changed or expired since the `GET`), with
 *    `step.expirationSeconds`. Stored: answer `step.decision`.
 * 5. A failed `ADD` or CAS means another decision on the same key came first: go back to 1.
 *    Bound the attempts (a handful: only requests for this one key contend) and treat running
 *    out as a store failure, so the failure mode answers.
 *
 * Every stored value is the TAT of a decision made on the value it replaced, so the decisions
 * happen in the order their writes succeed, exactly as on kv. A refund that fills the bucket
 * stores now with a one-second lifetime (equivalent to an absent key) instead of deleting, so
 * that the loop has one kind of write.
 *
 * @param stored - the value read (decimal integer of µs), or undefined on a miss
 * @param nowUs - the request time, integer µs since the Unix epoch (`clock.nowMs() × 1000`)
 * @param hits - the hits addend: > 0 to take, 0 to check, < 0 to refund; an integer
 */
export function gcraCasStep(
  stored: bigint | undefined,
  nowUs: number,
  hits: number,
  params: GcraParams,
): GcraCasStep {
  const decision = gcraDecide(
    stored === undefined ? undefined : Number(stored),
    nowUs,
    hits,
    params,
  );
  const tatUs = decision.newTatUs;
  if (tatUs === undefined)
    return { decision, write: undefined, expirationSeconds: 0 };
  return {
    decision,
    write: BigInt(tatUs),
    expirationSeconds: Math.ceil((tatUs - nowUs) / 1_000_000) + 1,
  };
}
