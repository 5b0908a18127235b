import { silentLogger } from "../../helpers/silent-logger.js";
import { describe, expect, it } from "vitest";
import { createDecider } from "../../../src/limiter/decide.js";
import { RateLimitResponse_Code as Code } from "../../../src/proto.js";
import { RequestError } from "../../../src/service/errors.js";
import {
  createRateLimitService,
  type RateLimitServiceOptions,
} from "../../../src/service/rate-limit-service.js";
import {
  defaultRequestBounds,
  exceedsUtf8Bytes,
  resolveRequestBounds,
} from "../../../src/service/request-bounds.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { fakeConfig } from "../../helpers/fake-config.js";
import { testRateLimit } from "../../helpers/rate-limit.js";
import { memoryLimiter } from "../../helpers/limiters.js";
import { request, type Entry } from "../../helpers/requests.js";

function setup(extra: Partial<RateLimitServiceOptions> = {}) {
  const clock = new FakeClock(2222);
  const stats = createStatsManager();
  const service = createRateLimitService({
    cache: memoryLimiter({
      decider: createDecider({ clock }),
      clock,
    }),
    statsManager: stats,
    clock,
    logger: silentLogger(),
    ...extra,
  });
  const limit = testRateLimit(stats, "d.a", 10);
  service.applyConfigUpdate({
    ok: true,
    config: fakeConfig("d", { "a=1": limit }),
  });
  return { service, limit };
}

/** `count` descriptors of `entries` entries each, every one `a=<value>`. */
function descriptors(count: number, entries = 1, value = "x"): Entry[][] {
  return Array.from({ length: count }, () =>
    Array.from({ length: entries }, (): Entry => ["a", value]),
  );
}

describe("exceedsUtf8Bytes", () => {
  it("measures UTF-8 bytes, not UTF-16 units", () => {
    expect(exceedsUtf8Bytes("", 1)).toBe(false);
    expect(exceedsUtf8Bytes("abc", 3)).toBe(false);
    expect(exceedsUtf8Bytes("abcd", 3)).toBe(true);
    // é is 2 bytes, € 3, 😀 (a surrogate pair) 4, a lone surrogate 3 (as U+FFFD).
    expect(exceedsUtf8Bytes("éé", 4)).toBe(false);
    expect(exceedsUtf8Bytes("éé", 3)).toBe(true);
    expect(exceedsUtf8Bytes("€€", 6)).toBe(false);
    expect(exceedsUtf8Bytes("€€", 5)).toBe(true);
    expect(exceedsUtf8Bytes("😀", 4)).toBe(false);
    expect(exceedsUtf8Bytes("😀", 3)).toBe(true);
    expect(exceedsUtf8Bytes("\ud800", 3)).toBe(false);
    expect(exceedsUtf8Bytes("\ud800", 2)).toBe(true);
    for (const text of [
      "x".repeat(70),
      "é".repeat(35),
      "€".repeat(23),
      "😀".repeat(17),
      "a\u0000b",
    ]) {
      for (const max of [1, 20, 23, 46, 68, 69, 70, 71, 100, 300]) {
        expect(exceedsUtf8Bytes(text, max)).toBe(Buffer.byteLength(text) > max);
      }
    }
  });
});

describe("resolveRequestBounds", () => {
  it("fills in the defaults and refuses bounds that are not integers ≥ 1", () => {
    expect(resolveRequestBounds(undefined)).toEqual(defaultRequestBounds);
    expect(resolveRequestBounds({ maxEntries: 3 })).toEqual({
      ...defaultRequestBounds,
      maxEntries: 3,
    });
    expect(() => resolveRequestBounds({ maxDescriptors: 0 })).toThrow(
      "request bound maxDescriptors must be an integer ≥ 1 (got 0)",
    );
    expect(() => resolveRequestBounds({ maxEntryBytes: 1.5 })).toThrow(
      RangeError,
    );
    expect(() =>
      createRateLimitService({
        ...setupOptions(),
        requestBounds: { maxEntries: Number.NaN },
      }),
    ).toThrow("request bound maxEntries must be an integer ≥ 1 (got NaN)");
  });
});

function setupOptions(): RateLimitServiceOptions {
  const clock = new FakeClock(0);
  return {
    cache: memoryLimiter({
      decider: createDecider({ clock }),
      clock,
    }),
    statsManager: createStatsManager(),
    clock,
    logger: silentLogger(),
  };
}

describe("createRateLimitService request bounds", () => {
  it("accepts requests at each default bound and refuses one past it, naming the field", async () => {
    const { service } = setup();
    const { maxDescriptors, maxEntries, maxEntryBytes } = defaultRequestBounds;
    await expect(
      service.shouldRateLimit(request("d", ...descriptors(maxDescriptors))),
    ).resolves.toMatchObject({ overallCode: Code.OK });
    await expect(
      service.shouldRateLimit(request("d", ...descriptors(maxDescriptors + 1))),
    ).rejects.toThrow(
      new RequestError(
        `descriptors must have at most ${maxDescriptors} items (got ${maxDescriptors + 1})`,
      ),
    );
    await expect(
      service.shouldRateLimit(request("d", ...descriptors(1, maxEntries))),
    ).resolves.toMatchObject({ overallCode: Code.OK });
    await expect(
      service.shouldRateLimit(
        request("d", ...descriptors(1), ...descriptors(1, maxEntries + 1)),
      ),
    ).rejects.toThrow(
      `descriptors[1].entries must have at most ${maxEntries} items (got ${maxEntries + 1})`,
    );
    const longest =
      "€".repeat(maxEntryBytes / 4) + "x".repeat(maxEntryBytes / 4);
    expect(Buffer.byteLength(longest)).toBe(maxEntryBytes);
    await expect(
      service.shouldRateLimit(request("d", [[longest, longest]])),
    ).resolves.toMatchObject({ overallCode: Code.OK });
    await expect(
      service.shouldRateLimit(
        request("d", [
          ["a", ""],
          [`${longest}y`, ""],
        ]),
      ),
    ).rejects.toThrow(
      `descriptors[0].entries[1].key must be at most ${maxEntryBytes} bytes`,
    );
    await expect(
      service.shouldRateLimit(request("d", [["a", `é${longest}`]])),
    ).rejects.toThrow(
      `descriptors[0].entries[0].value must be at most ${maxEntryBytes} bytes`,
    );
    await expect(
      service.shouldRateLimit(request(`d${longest}`, ...descriptors(1))),
    ).rejects.toThrow(`domain must be at most ${maxEntryBytes} bytes`);
  });

  it("applies configured bounds", async () => {
    const { service } = setup({
      requestBounds: { maxDescriptors: 2, maxEntries: 2, maxEntryBytes: 4 },
    });
    await expect(
      service.shouldRateLimit(request("d", ...descriptors(2, 2))),
    ).resolves.toMatchObject({ overallCode: Code.OK });
    await expect(
      service.shouldRateLimit(request("d", ...descriptors(3))),
    ).rejects.toThrow("descriptors must have at most 2 items (got 3)");
    await expect(
      service.shouldRateLimit(request("d", ...descriptors(1, 3))),
    ).rejects.toThrow(
      "descriptors[0].entries must have at most 2 items (got 3)",
    );
    await expect(
      service.shouldRateLimit(request("d", ...descriptors(1, 1, "12345"))),
    ).rejects.toThrow(
      "descriptors[0].entries[0].value must be at most 4 bytes",
    );
    await expect(
      service.shouldRateLimit(request("d", ...descriptors(1, 1, "éé"))),
    ).resolves.toMatchObject({ overallCode: Code.OK });
    await expect(
      service.shouldRateLimit(request("d", ...descriptors(1, 1, "é€"))),
    ).rejects.toThrow(
      "descriptors[0].entries[0].value must be at most 4 bytes",
    );
  });

  it("refuses a descriptor hits_addend above 2^53 − 1 instead of rounding it, and counts nothing", async () => {
    const { service, limit } = setup();
    const at = BigInt(Number.MAX_SAFE_INTEGER);
    for (const hitsAddend of [at + 1n, 2n ** 63n, 2n ** 64n - 1n]) {
      await expect(
        service.shouldRateLimit(
          request("d", [["a", "1"]], {
            entries: [["a", "1"]],
            hits: hitsAddend,
          }),
        ),
      ).rejects.toThrow(
        new RequestError(
          `descriptors[1].hits_addend must be at most 9007199254740991 (got ${hitsAddend})`,
        ),
      );
    }
    expect(limit.stats.totalHits.value()).toBe(0);
    // 2^53 − 1 itself is exact: accepted, counted as it is, over the limit of 10.
    const response = await service.shouldRateLimit(
      request("d", { entries: [["a", "1"]], hits: at }),
    );
    expect(response.overallCode).toBe(Code.OVER_LIMIT);
    expect(limit.stats.totalHits.value()).toBe(Number.MAX_SAFE_INTEGER);
  });
});
