import { describe, expect, it } from "vitest";
import { kvPoolStatsScope } from "../../../../src/backends/kv/kv-client.js";

describe("kvPoolStatsScope", () => {
  it("uses the reference's pool scopes with the neutral word", () => {
    expect(kvPoolStatsScope("main")).toBe("ratelimit.kv_pool");
    expect(kvPoolStatsScope("per-second")).toBe("ratelimit.kv_per_second_pool");
  });
});
