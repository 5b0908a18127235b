import { silentLogger } from "../../../helpers/silent-logger.js";
import { afterEach, describe, expect, it } from "vitest";
import {
  maxCasAttempts,
  McCounterBackend,
} from "../../../../src/backends/mc/mc-counter-backend.js";
import { BackendError } from "../../../../src/limiter/backend-error.js";
import type { BucketSlot } from "../../../../src/limiter/counter-backend.js";
import {
  gcraDecide,
  resolveGcraParams,
  type GcraParams,
} from "../../../../src/limiter/gcra.js";
import { FakeClock } from "../../../helpers/fake-clock.js";
import {
  mcReply,
  startMcPeer,
  type McPeer,
  type McPeerRequest,
} from "../../../helpers/mc-peer.js";

// The compare-and-swap loop of mc token buckets against a scripted peer: the races real
// memcached cannot be made to lose on demand. The loop against real memcached (races between
// two clients included) is in test/integration/counter-backend-contract.test.ts.

const opGet = 0x00;
const opSet = 0x01;
const opAdd = 0x02;
const nowSeconds = 1_800_000_000;
const nowUs = nowSeconds * 1_000_000;
const params = resolveGcraParams({ requestsPerUnit: 2, windowSeconds: 1 });

const peers: McPeer[] = [];
const backends: McCounterBackend[] = [];
afterEach(async () => {
  await Promise.all(backends.splice(0).map((b) => b.close()));
  await Promise.all(peers.splice(0).map((p) => p.close()));
});

async function backendOn(
  answer: (request: McPeerRequest) => Buffer[],
): Promise<{ backend: McCounterBackend; peer: McPeer }> {
  const peer = await startMcPeer(answer);
  peers.push(peer);
  const backend = new McCounterBackend({
    clock: new FakeClock(nowSeconds),
    logger: silentLogger(),
    hostPorts: [peer.address],
    maxIdleConns: 1,
  });
  backends.push(backend);
  return { backend, peer };
}

function bucket(
  cacheKey: string,
  increment: number,
  tokenBucket: GcraParams | undefined = params,
): BucketSlot {
  return {
    cacheKey,
    perSecond: false,
    tokenBucket,
    increment,
    decision: undefined,
  };
}

/** The requests the peer got, NOOPs left out: `[opcode, key, cas, expiration, value]`. */
function commands(peer: McPeer): [number, string, bigint, number, string][] {
  return peer.requests
    .filter((r) => r.opcode !== 0x0a)
    .map((r) => [
      r.opcode,
      r.key,
      r.cas,
      r.extras.length === 8 ? r.extras.readUInt32BE(4) : -1,
      r.value.toString(),
    ]);
}

describe("McCounterBackend.takeTokens", () => {
  it("gives up with a BackendError after losing every compare-and-swap", async () => {
    const tat = String(nowUs + 400_000);
    const { backend, peer } = await backendOn((request) => [
      request.opcode === opGet
        ? mcReply(opGet, request.opaque, { value: tat, cas: 9n, extras: 4 })
        : mcReply(request.opcode, request.opaque, { status: 0x02 }),
    ]);
    const slot = bucket("tb_k", 1);
    const err = await backend.takeTokens([slot], nowUs).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(BackendError);
    expect((err as BackendError).message).toBe(
      `token bucket tb_k: ${maxCasAttempts} compare-and-swap attempts in a row lost to concurrent writers`,
    );
    expect(slot.decision).toBeUndefined();
    const sent = commands(peer);
    expect(sent.length).toBe(2 * maxCasAttempts);
    // GET, then SET with the token read, every attempt; the new TAT is one T later.
    expect(sent.slice(0, 2)).toEqual([
      [opGet, "tb_k", 0n, -1, ""],
      [opSet, "tb_k", 9n, 2, String(nowUs + 900_000)],
    ]);
  });

  it("creates a missing key with ADD, and goes round again when another writer came first", async () => {
    let gets = 0;
    const { backend, peer } = await backendOn((request) => {
      if (request.opcode === opGet) {
        gets++;
        return [
          gets === 1
            ? mcReply(opGet, request.opaque, { status: 0x01 })
            : mcReply(opGet, request.opaque, {
                value: String(nowUs + 500_000),
                cas: 3n,
                extras: 4,
              }),
        ];
      }
      // The ADD loses (another request created the key); the CAS wins.
      return [
        mcReply(request.opcode, request.opaque, {
          status: request.opcode === opAdd ? 0x02 : 0x00,
        }),
      ];
    });
    const slot = bucket("tb_k", 1);
    await backend.takeTokens([slot], nowUs);
    expect(slot.decision).toEqual(
      gcraDecide(nowUs + 500_000, nowUs, 1, params),
    );
    expect(commands(peer)).toEqual([
      [opGet, "tb_k", 0n, -1, ""],
      [opAdd, "tb_k", 0n, 2, String(nowUs + 500_000)],
      [opGet, "tb_k", 0n, -1, ""],
      [opSet, "tb_k", 3n, 2, String(nowUs + 1_000_000)],
    ]);
  });

  it("writes nothing for a check, a refusal or a refund on a full bucket", async () => {
    const full = String(nowUs + 1_000_000);
    const { backend, peer } = await backendOn((request) => [
      request.key === "absent"
        ? mcReply(opGet, request.opaque, { status: 0x01 })
        : mcReply(opGet, request.opaque, { value: full, cas: 4n, extras: 4 }),
    ]);
    const slots = [bucket("full", 0), bucket("full2", 1), bucket("absent", -1)];
    await backend.takeTokens(slots, nowUs);
    expect(slots.map((s) => s.decision)).toEqual([
      gcraDecide(nowUs + 1_000_000, nowUs, 0, params),
      gcraDecide(nowUs + 1_000_000, nowUs, 1, params),
      gcraDecide(undefined, nowUs, -1, params),
    ]);
    expect(slots[1]!.decision!.allowed).toBe(false);
    expect(commands(peer).map(([op]) => op)).toEqual([opGet, opGet, opGet]);
  });

  it("sends a lifetime over 30 days as a Unix time", async () => {
    // One per 40 days: a TAT 40 days ahead lives 40 days + 1 s.
    const slow = resolveGcraParams({
      requestsPerUnit: 1,
      windowSeconds: 40 * 86_400,
    });
    const { backend, peer } = await backendOn((request) => [
      request.opcode === opGet
        ? mcReply(opGet, request.opaque, { status: 0x01 })
        : mcReply(request.opcode, request.opaque),
    ]);
    await backend.takeTokens([bucket("slow", 1, slow)], nowUs);
    expect(commands(peer)[1]).toEqual([
      opAdd,
      "slow",
      0n,
      nowSeconds + 40 * 86_400 + 1,
      String(nowUs + 40 * 86_400 * 1_000_000),
    ]);
  });

  it("rejects with a BackendError when the node is down, failOpen or not", async () => {
    const { backend, peer } = await backendOn(() => []);
    await peer.close();
    await expect(
      backend.takeTokens([bucket("k", 1)], nowUs),
    ).rejects.toBeInstanceOf(BackendError);
  });

  it("rejects an unusable reply (no CAS token) with a BackendError", async () => {
    const { backend } = await backendOn((request) => [
      mcReply(opGet, request.opaque, { value: "1", extras: 4 }),
    ]);
    await expect(backend.takeTokens([bucket("k", 1)], nowUs)).rejects.toThrow(
      /without a CAS token/,
    );
  });

  it("refuses a slot without tokenBucket params before sending anything", async () => {
    const { backend, peer } = await backendOn(() => []);
    await expect(
      backend.takeTokens(
        [bucket("a", 1), { ...bucket("b", 1), tokenBucket: undefined }],
        nowUs,
      ),
    ).rejects.toBeInstanceOf(TypeError);
    expect(peer.requests).toEqual([]);
  });
});
