import { describe, expect, it } from "vitest";
import {
  applyBucketReply,
  jobKey,
  jobSize,
  type KvBucketJob,
} from "../../../../src/backends/kv/kv-job.js";
import type { BucketSlot } from "../../../../src/limiter/counter-backend.js";
import { gcraDecide, resolveGcraParams } from "../../../../src/limiter/gcra.js";

const params = resolveGcraParams({ requestsPerUnit: 2, windowSeconds: 1 });
const nowUs = 1_700_000_000_000_000;

function bucketJob(...increments: number[]): KvBucketJob {
  const slots: BucketSlot[] = increments.map((increment, i) => ({
    cacheKey: `k${i}`,
    perSecond: false,
    tokenBucket: params,
    increment,
    decision: undefined,
  }));
  return { kind: "gcra", slots, nowUs, failure: undefined };
}

describe("applyBucketReply", () => {
  it("turns the script's reply into the decision gcraDecide gives", () => {
    const job = bucketJob(1, 0);
    const tat = nowUs + params.emissionIntervalUs;
    // ioredis hands integer replies as numbers, inside an array.
    applyBucketReply(job, 0, [1, tat, 1]);
    applyBucketReply(job, 1, [1, nowUs, 0]);
    expect(job.failure).toBeUndefined();
    expect(job.slots[0]!.decision).toEqual(
      gcraDecide(undefined, nowUs, 1, params),
    );
    expect(job.slots[1]!.decision).toEqual(
      gcraDecide(undefined, nowUs, 0, params),
    );
    expect([jobSize(job), jobKey(job, 1)]).toEqual([2, "k1"]);
  });

  it("records a reply that is not the script's as the job's failure, the first one winning", () => {
    for (const reply of [
      "OK",
      null,
      42,
      [],
      [1, nowUs],
      [2, nowUs, 0],
      [1, nowUs, 2],
      [1, nowUs - 1, 0],
      [1, nowUs + 0.5, 1],
      [1, "abc", 1],
      [1, nowUs, 1, 0],
    ]) {
      const job = bucketJob(1);
      applyBucketReply(job, 0, reply);
      expect(job.failure, JSON.stringify(reply)).toBeInstanceOf(RangeError);
      expect(job.slots[0]!.decision).toBeUndefined();
    }
    const job = bucketJob(1, 1);
    applyBucketReply(job, 0, "first");
    const first = job.failure;
    applyBucketReply(job, 1, "second");
    expect(job.failure).toBe(first);
    expect((first as Error).message).toContain("first");
  });
});
