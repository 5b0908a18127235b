import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { ConfigError } from "../../../src/config/config-error.js";
import { HealthChecker } from "../../../src/health/health.js";
import { createDecider } from "../../../src/limiter/decide.js";
import {
  createRateLimitService,
  type RateLimitServiceOptions,
} from "../../../src/service/rate-limit-service.js";
import { statNames } from "../../../src/stats/names.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { fakeConfig } from "../../helpers/fake-config.js";
import { memoryLimiter } from "../../helpers/limiters.js";

function setup(extra: Partial<RateLimitServiceOptions> = {}) {
  const clock = new FakeClock(1_767_323_045); // 2026-01-02T03:04:05Z
  const stats = createStatsManager();
  const logs: { level: number; msg: string }[] = [];
  const logger = pino(
    { level: "info" },
    {
      write(line: string) {
        logs.push(JSON.parse(line) as { level: number; msg: string });
      },
    },
  );
  const service = createRateLimitService({
    cache: memoryLimiter({ decider: createDecider({ clock }), clock }),
    statsManager: stats,
    clock,
    logger,
    ...extra,
  });
  const gauge = () =>
    stats.store
      .snapshot()
      .gauges.find((g) => g.name === statNames.configLastLoadFailed)
      ?.value();
  const warnings = () => logs.filter((l) => l.level === 40).map((l) => l.msg);
  return { clock, service, gauge, logs, warnings };
}

const bad = new ConfigError("a.yaml: invalid rate limit unit 'foo'", {
  file: "a.yaml",
  line: 5,
  fieldPath: "descriptors[0].rate_limit.unit",
  hint: "valid units: SECOND",
});

describe("createRateLimitService reloadStatus", () => {
  it("records the last failed load until a good one, with the gauge", () => {
    const { clock, service, gauge, logs } = setup();
    expect(service.reloadStatus()).toEqual({
      loadedAt: null,
      lastFailedReload: null,
    });
    // No failure yet: the gauge does not exist (only the reference's statistics).
    expect(gauge()).toBeUndefined();

    service.applyConfigUpdate({ ok: false, error: bad });
    expect(service.reloadStatus()).toEqual({
      loadedAt: null,
      lastFailedReload: {
        file: "a.yaml",
        line: 5,
        fieldPath: "descriptors[0].rate_limit.unit",
        message:
          "invalid rate limit unit 'foo' (valid units: SECOND); field descriptors[0].rate_limit.unit",
        time: "2026-01-02T03:04:05.000Z",
      },
    });
    expect(gauge()).toBe(1);
    expect(logs.find((l) => l.level === 50)?.msg).toBe(
      "error loading new configuration: a.yaml: invalid rate limit unit 'foo' (valid units: SECOND); line 5, field descriptors[0].rate_limit.unit",
    );

    clock.seconds += 60;
    service.applyConfigUpdate({ ok: true, config: fakeConfig("d", {}) });
    expect(service.reloadStatus()).toEqual({
      loadedAt: "2026-01-02T03:05:05.000Z",
      lastFailedReload: null,
    });
    expect(gauge()).toBe(0);
  });

  it("warns once when no config loads while health does not follow the config", () => {
    const { service, warnings } = setup({
      health: new HealthChecker([{ name: "sigterm", healthy: true }]),
    });
    service.applyConfigUpdate({ ok: false, error: bad });
    service.applyConfigUpdate({ ok: false, error: bad });
    expect(warnings()).toHaveLength(1);
    expect(warnings()[0]).toContain(
      "set HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true",
    );
  });

  it("does not warn when health follows the config, or once a config has loaded", () => {
    const following = setup({
      health: new HealthChecker([{ name: "config", healthy: false }]),
    });
    following.service.applyConfigUpdate({ ok: false, error: bad });
    expect(following.warnings()).toEqual([]);

    const loaded = setup({
      health: new HealthChecker([{ name: "sigterm", healthy: true }]),
    });
    loaded.service.applyConfigUpdate({
      ok: true,
      config: fakeConfig("d", {}),
    });
    loaded.service.applyConfigUpdate({ ok: false, error: bad });
    expect(loaded.warnings()).toEqual([]);
  });
});
