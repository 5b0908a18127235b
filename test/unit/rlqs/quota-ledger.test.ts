import { describe, expect, it } from "vitest";
import { MemoryQuotaLedger } from "../../../src/rlqs/quota-ledger.js";

describe("MemoryQuotaLedger", () => {
  it("subscribes on the first report and measures demand with the server's clock", async () => {
    const ledger = new MemoryQuotaLedger();
    // The subscribing report's counts cover an unknown span: no demand yet.
    expect(await ledger.report("b", "s1", { allowed: 7, denied: 0 }, 0)).toBe(
      true,
    );
    expect((await ledger.demands("b")).get("s1")).toBeUndefined();
    // Reports closer than a second apart add up into one measurement.
    expect(
      await ledger.report("b", "s1", { allowed: 30, denied: 0 }, 500),
    ).toBe(false);
    expect((await ledger.demands("b")).get("s1")).toBeUndefined();
    await ledger.report("b", "s1", { allowed: 40, denied: 30 }, 5_000);
    // 100 requests over 5 s of server time (whatever time_elapsed said).
    expect((await ledger.demands("b")).get("s1")).toBe(20);
    await ledger.report("b", "s1", { allowed: 100, denied: 650 }, 10_000);
    expect((await ledger.demands("b")).get("s1")).toBe(85); // EWMA of 20 and 150
  });

  it("lists the streams of a bucket and forgets one that leaves", async () => {
    const ledger = new MemoryQuotaLedger();
    await ledger.report("b", "s1", { allowed: 0, denied: 0 }, 0);
    await ledger.report("b", "s2", { allowed: 0, denied: 0 }, 0);
    expect([...(await ledger.demands("b")).keys()]).toEqual(["s1", "s2"]);
    await ledger.leave("b", "s1");
    expect([...(await ledger.demands("b")).keys()]).toEqual(["s2"]);
    await ledger.leave("b", "s2");
    expect((await ledger.demands("b")).size).toBe(0);
    // Back again: a new subscription.
    expect(await ledger.report("b", "s1", { allowed: 0, denied: 0 }, 0)).toBe(
      true,
    );
  });
});
