import { createHash } from "node:crypto";

/**
 * All-or-nothing charging on one instance, atomically (Redis runs a script alone). KEYS: per
 * descriptor its current window's key then its previous window's key (the current key again
 * for fixed windows). ARGV: per descriptor `hits, limit, expiration, windowSeconds,
 * secondsLeftInWindow, sliding (0|1), checked (1 unless shadow mode)`. Reads every counter;
 * when every checked descriptor fits (`current + ceil(previous × left / window) + earlier +
 * hits ≤ limit`, `earlier` being the hits of the request's earlier descriptors on the same
 * key), runs INCRBY + EXPIRE on every current key. Replies `[charged (0|1), current₁,
 * previous₁, current₂, previous₂, …]` with the values before the request.
 */
export const allOrNothingScript = `
local n = #KEYS / 2
local reply = {1}
local fits = true
local earlier = {}
for i = 1, n do
  local a = (i - 1) * 7
  local key = KEYS[2 * i - 1]
  local before = earlier[key] or 0
  earlier[key] = before + tonumber(ARGV[a + 1])
  local current = tonumber(redis.call('GET', key) or '0')
  local previous = 0
  if ARGV[a + 6] == '1' then
    previous = tonumber(redis.call('GET', KEYS[2 * i]) or '0')
  end
  reply[2 * i] = current
  reply[2 * i + 1] = previous
  if ARGV[a + 7] == '1' then
    local weighted = current
    if previous > 0 then
      weighted = weighted + math.ceil(previous * tonumber(ARGV[a + 5]) / tonumber(ARGV[a + 4]))
    end
    if weighted + before + tonumber(ARGV[a + 1]) > tonumber(ARGV[a + 2]) then fits = false end
  end
end
if fits then
  for i = 1, n do
    local a = (i - 1) * 7
    redis.call('INCRBY', KEYS[2 * i - 1], ARGV[a + 1])
    redis.call('EXPIRE', KEYS[2 * i - 1], ARGV[a + 3])
  end
else
  reply[1] = 0
end
return reply
`;

/** SHA-1 of {@link allOrNothingScript}, hex: the `EVALSHA` handle. */
export const allOrNothingScriptSha = createHash("sha1")
  .update(allOrNothingScript)
  .digest("hex");

/**
 * A decrement that never goes below 0 and never creates a counter (a refund, or the undo of a
 * lost all-or-nothing race). KEYS: the counter. ARGV: the hits to take back (> 0). Replies the
 * counter after it, 0 when the key does not exist. One key per call, so it runs on a cluster
 * too; DECRBY keeps the key's expiry.
 */
export const decrementScript = `
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local after = redis.call('DECRBY', KEYS[1], ARGV[1])
if after < 0 then
  redis.call('INCRBY', KEYS[1], -after)
  return 0
end
return after
`;

/** Whether a store error says the script is not in its script cache (`NOSCRIPT …`). */
export function isNoScript(err: unknown): boolean {
  return (err instanceof Error ? err.message : String(err)).startsWith(
    "NOSCRIPT",
  );
}

/** A Lua script with its SHA-1 (hex), the `EVALSHA` handle: see {@link runKvScript}. */
export interface KvScript {
  readonly text: string;
  readonly sha: string;
}

/** Registers a script: computes its `EVALSHA` handle once. */
export function kvScript(text: string): KvScript {
  return { text, sha: createHash("sha1").update(text).digest("hex") };
}

/**
 * The two script commands of a connection (an ioredis `Redis` or `Cluster`: a cluster sends
 * each call to the node of its first key's slot).
 */
export interface KvScriptRunner {
  evalsha(
    sha: string,
    numKeys: number,
    ...keysAndArgs: (string | number)[]
  ): Promise<unknown>;
  eval(
    script: string,
    numKeys: number,
    ...keysAndArgs: (string | number)[]
  ): Promise<unknown>;
}

/**
 * Runs a script by `EVALSHA`; when the store answers `NOSCRIPT` (restarted, flushed its
 * scripts, failed over, or a cluster node that never ran it) sends it again once as `EVAL` of
 * the whole text, which also puts it back in that node's script cache (the same retry as the
 * token-bucket calls, `issueBuckets` in kv-client.ts).
 *
 * @returns the script's reply, as the connection decodes it
 * @throws the store's error (any but the first `NOSCRIPT`), unchanged
 */
export async function runKvScript(
  redis: KvScriptRunner,
  script: KvScript,
  keys: readonly string[],
  args: readonly (string | number)[],
): Promise<unknown> {
  try {
    return await redis.evalsha(script.sha, keys.length, ...keys, ...args);
  } catch (err) {
    if (!isNoScript(err)) throw err;
    return await redis.eval(script.text, keys.length, ...keys, ...args);
  }
}
