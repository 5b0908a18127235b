import { create } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createClient,
  createRouterTransport,
} from "@connectrpc/connect";
import { silentLogger } from "../helpers/silent-logger.js";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../src/config/load-config.js";
import { HealthChecker } from "../../src/health/health.js";
import { createDecider } from "../../src/limiter/decide.js";
import {
  Health,
  HealthCheckResponse_ServingStatus as Serving,
  RateLimitRequestSchema,
  RateLimitResponse_Code as RlCode,
  RateLimitService,
} from "../../src/proto.js";
import { createRoutes } from "../../src/server/routes.js";
import { createShouldRateLimitHandler } from "../../src/server/should-rate-limit-handler.js";
import { createRateLimitService } from "../../src/service/rate-limit-service.js";
import { createStatsManager } from "../../src/stats/stats-manager.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { memoryLimiter } from "../helpers/limiters.js";

// The whole decision path through the Connect router, in memory (no sockets), with a fake
// clock on either side of a window boundary.
function setup(
  text = "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 2 }\n",
) {
  const clock = new FakeClock(1_000_000_020);
  const statsManager = createStatsManager();
  const health = new HealthChecker([{ name: "sigterm", healthy: true }]);
  const service = createRateLimitService({
    cache: memoryLimiter({
      decider: createDecider({ clock }),
      clock,
      leaseClock: clock,
    }),
    statsManager,
    clock,
    logger: silentLogger(),
  });
  service.applyConfigUpdate({
    ok: true,
    config: loadConfig([{ name: "rl.yaml", text }], { statsManager }),
  });
  const shouldRateLimit = createShouldRateLimitHandler({
    service,
    statsManager,
    logger: silentLogger(),
  });
  const transport = createRouterTransport(
    createRoutes({ shouldRateLimit, health, statsManager }),
  );
  return { clock, health, statsManager, transport };
}

const request = create(RateLimitRequestSchema, {
  domain: "rl",
  descriptors: [{ entries: [{ key: "user", value: "u1" }] }],
});

describe("the Connect router (in memory)", () => {
  it("counts within a window and starts over in the next one", async () => {
    const { clock, transport, statsManager } = setup();
    const client = createClient(RateLimitService, transport);
    const codes: RlCode[] = [];
    for (let i = 0; i < 3; i++)
      codes.push((await client.shouldRateLimit(request)).overallCode);
    expect(codes).toEqual([RlCode.OK, RlCode.OK, RlCode.OVER_LIMIT]);
    clock.seconds = 1_000_000_080; // the next minute window
    const next = await client.shouldRateLimit(request);
    expect(next.overallCode).toBe(RlCode.OK);
    expect(next.statuses[0]?.limitRemaining).toBe(1);
    expect(statsManager.serverTotalRequests("ShouldRateLimit").value()).toBe(4);
    expect(statsManager.rateLimitStats("rl.user").overLimit.value()).toBe(1);
  });

  it("maps an invalid request to INVALID_ARGUMENT and counts it", async () => {
    const { transport, statsManager } = setup();
    const client = createClient(RateLimitService, transport);
    const err = await client
      .shouldRateLimit({ domain: "", descriptors: [] })
      .then(
        () => undefined,
        (e: unknown) => ConnectError.from(e),
      );
    expect(err?.code).toBe(Code.InvalidArgument);
    expect(statsManager.shouldRateLimitError("service_error").value()).toBe(1);
  });

  it("reports health through the gRPC health service", async () => {
    const { health, transport } = setup();
    const client = createClient(Health, transport);
    expect((await client.check({ service: "ratelimit" })).status).toBe(
      Serving.SERVING,
    );
    health.fail("sigterm");
    expect((await client.check({ service: "ratelimit" })).status).toBe(
      Serving.NOT_SERVING,
    );
  });

  it("serves a lease: true rule from leases: the same answers, lease statistics counted", async () => {
    const { clock, transport, statsManager } = setup(
      "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: { unit: minute, requests_per_unit: 3, lease: true }\n",
    );
    const client = createClient(RateLimitService, transport);
    const answers: [RlCode, number | undefined][] = [];
    for (let i = 0; i < 4; i++) {
      const response = await client.shouldRateLimit(request);
      answers.push([
        response.overallCode,
        response.statuses[0]?.limitRemaining,
      ]);
    }
    expect(answers).toEqual([
      [RlCode.OK, 2],
      [RlCode.OK, 1],
      [RlCode.OK, 0],
      [RlCode.OVER_LIMIT, 0],
    ]);
    clock.seconds = 1_000_000_080; // the next minute window
    expect((await client.shouldRateLimit(request)).overallCode).toBe(RlCode.OK);
    const prefix = "ratelimit.service.rate_limit.rl.user.";
    expect(statsManager.store.counter(prefix + "lease_taken").value()).toBe(4);
    expect(statsManager.store.counter(prefix + "lease_unused").value()).toBe(0);
    expect(statsManager.rateLimitStats("rl.user").overLimit.value()).toBe(1);
  });
});
