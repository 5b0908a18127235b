import { create } from "@bufbuild/protobuf";
import { silentLogger } from "../../helpers/silent-logger.js";
import { describe, expect, it } from "vitest";
import { formatExplanation } from "../../../src/cli/explain-format.js";
import { loadConfig } from "../../../src/config/load-config.js";
import { explainLimit } from "../../../src/explain/descriptor-explanation.js";
import { explainConfig } from "../../../src/explain/explain-message.js";
import { createExplainService } from "../../../src/explain/explain-service.js";
import { createDecider } from "../../../src/limiter/decide.js";
import {
  ExplainRequestSchema,
  ExplainResponseSchema,
} from "../../../src/proto.js";
import { createRateLimitService } from "../../../src/service/rate-limit-service.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { memoryLimiter } from "../../helpers/limiters.js";
import { request } from "../../helpers/requests.js";

// The tree of `ratelimit-client -explain` for token buckets, calendar windows and rate_limits:
// lists, from real Explain answers on the memory backend at a fixed time.

const config = `domain: api
descriptors:
  - key: user
    rate_limits:
      - { unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20 }
      - { unit: hour, requests_per_unit: 3 }
      - { name: monthly, unit: month, requests_per_unit: 1000, time_zone: Europe/Berlin }
  - key: key
    rate_limit: { unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20 }
  - key: tenant
    rate_limit: { unit: week, requests_per_unit: 1000, time_zone: America/New_York, week_start: sunday }
`;

/** 2026-11-27T12:00:00Z. */
const noon = Date.UTC(2026, 10, 27, 12) / 1000;

function build() {
  const clock = new FakeClock(noon);
  const statsManager = createStatsManager();
  const cache = memoryLimiter({
    decider: createDecider({ clock, expirationJitterMaxSeconds: 0 }),
    clock,
  });
  const service = createRateLimitService({
    cache,
    statsManager,
    clock,
    logger: silentLogger(),
  });
  service.applyConfigUpdate({
    ok: true,
    config: loadConfig([{ name: "api.yaml", text: config }], {
      statsManager,
    }),
  });
  const explain = createExplainService({
    service,
    cache,
    clock,
    backend: "memory",
  });
  return { service, explain };
}

describe("formatExplanation of token buckets, calendar windows and rate_limits: lists", () => {
  it("prints one subtree per limit of a list, the deciding one marked", async () => {
    const { service, explain } = build();
    await service.shouldRateLimit(
      request({ domain: "api", hitsAddend: 3 }, [["user", "alice"]]),
    );
    const req = request({ domain: "api", hitsAddend: 1 }, [["user", "alice"]]);
    const r = await explain.explain(
      create(ExplainRequestSchema, { request: req }),
    );
    expect(formatExplanation(r, req).split("\n")).toEqual([
      "domain api (backend memory, read only, nothing charged)",
      "└─ descriptors[0] user=alice  ◀ decides",
      "   ├─ path[0]: user=alice → key-only default api.user  (api.yaml:3)",
      "   ├─ rule: api.user rate_limits: 3 limits  (api.yaml:3)",
      "   ├─ limits[0] per_second: 10 per SECOND token_bucket burst 20",
      "   │  ├─ token bucket: api_user_alice_tb1_10_20 10 per SECOND, burst 20: 17 left → 16, full in 400ms (TAT 2026-11-27T12:00:00.300Z → 2026-11-27T12:00:00.400Z; one hit every 100ms)",
      "   │  └─ decision: within limit → OK, 16 remaining, full in 1s",
      "   ├─ limits[1] per_hour: 3 per HOUR  ◀ this limit decides",
      "   │  ├─ counter: api_user_alice_1795780800_w3600 = 3 → 4 (window 2026-11-27T12:00:00.000Z .. 2026-11-27T13:00:00.000Z)",
      "   │  └─ decision: OVER LIMIT → OVER_LIMIT, 0 remaining, resets in 3600s",
      "   ├─ limits[2] monthly: 1000 per MONTH time_zone Europe/Berlin",
      "   │  ├─ counter: api_user_alice_2026-11@Europe/Berlin = 3 → 4 (window 2026-10-31T23:00:00.000Z .. 2026-11-30T23:00:00.000Z)",
      "   │  ├─ calendar: month in Europe/Berlin (2026-11, resets 2026-12-01T00:00:00+01:00, in 3d 11h 00m)",
      "   │  └─ decision: within limit → OK, 996 remaining, resets in 298800s",
      "   ├─ hits addend: 1",
      "   ├─ decision: OVER LIMIT → OVER_LIMIT, 0 remaining, resets in 3600s  ◀ decides",
      "   └─ note: rate_limits: 3 limits, each checked on its own; limits[1] is over its limit and decides",
      "overall: OVER_LIMIT",
      "OVER_LIMIT: descriptors[0] (api.user) is over its limit",
    ]);
  });

  it("prints a token bucket's state and a calendar week", async () => {
    const { service, explain } = build();
    await service.shouldRateLimit(
      request(
        { domain: "api", hitsAddend: 18 },
        [["key", "k1"]],
        [["tenant", "acme"]],
      ),
    );
    const req = request(
      { domain: "api", hitsAddend: 5 },
      [["key", "k1"]],
      [["tenant", "acme"]],
    );
    const r = await explain.explain(
      create(ExplainRequestSchema, { request: req }),
    );
    const lines = formatExplanation(r, req).split("\n");
    expect(lines).toContain(
      "│  ├─ rule: api.key 10 per SECOND token_bucket burst 20  (api.yaml:8)",
    );
    expect(lines).toContain(
      "│  ├─ token bucket: api_key_k1_tb1_10_20 10 per SECOND, burst 20: 2 left; refused, fits in 300ms, full in 1.8s (TAT 2026-11-27T12:00:01.800Z; one hit every 100ms)",
    );
    expect(lines).toContain(
      "│  ├─ decision: OVER LIMIT → OVER_LIMIT, 2 remaining, full in 2s  ◀ decides",
    );
    expect(lines).toContain(
      "   ├─ calendar: week from sunday in America/New_York (2026-11-22/P1W, resets 2026-11-29T00:00:00-05:00, in 1d 17h 00m)",
    );
    expect(lines).toContain(
      "   ├─ rule: api.tenant 1000 per WEEK time_zone America/New_York week_start sunday  (api.yaml:10)",
    );
  });

  it("lists the limits offline, without counters", () => {
    const statsManager = createStatsManager();
    const loaded = loadConfig([{ name: "api.yaml", text: config }], {
      statsManager,
    });
    const req = request({ domain: "api", hitsAddend: 1 }, [["user", "alice"]]);
    const explained = explainConfig(
      (domain, d) => explainLimit(loaded.view!, domain, d),
      req,
    );
    const text = formatExplanation(
      create(ExplainResponseSchema, {
        backend: "none",
        domainFound: true,
        descriptors: explained.descriptors,
      }),
      req,
    );
    expect(text.split("\n").slice(3)).toEqual([
      "   ├─ rule: api.user rate_limits: 3 limits  (api.yaml:3)",
      "   ├─ limits[0] per_second: 10 per SECOND token_bucket burst 20",
      "   ├─ limits[1] per_hour: 3 per HOUR",
      "   ├─ limits[2] monthly: 1000 per MONTH time_zone Europe/Berlin",
      "   └─ decision: limited (counters not read)",
    ]);
  });
});
