import { silentLogger } from "../../helpers/silent-logger.js";
import { describe, expect, it } from "vitest";
import type { AppContext } from "../../../src/app/app-context.js";
import { createMcCache } from "../../../src/app/mc-cache.js";
import { HealthChecker } from "../../../src/health/health.js";
import { createDecider } from "../../../src/limiter/decide.js";
import { SettingsError } from "../../../src/settings/settings-error.js";
import { loadSettings } from "../../../src/settings/settings.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";

const clock = new FakeClock(0);

function context(): AppContext {
  return {
    logger: silentLogger(),
    clock,
    health: new HealthChecker([]),
    statsManager: createStatsManager(),
    decider: createDecider({ clock }),
    workerIndex: 0,
  };
}

function build(env: Record<string, string>) {
  const { settings } = loadSettings({ BACKEND_TYPE: "mc", ...env });
  return createMcCache(settings, context());
}

describe("createMcCache", () => {
  it("builds the backend from MC_HOST_PORT in list order and registers its health", async () => {
    const ctx = context();
    const { settings } = loadSettings({
      BACKEND_TYPE: "mc",
      MC_HOST_PORT: "mc-b:11211,mc-a:11211",
    });
    const cache = createMcCache(settings, ctx);
    expect(cache.backend.nodes).toEqual(["mc-b:11211", "mc-a:11211"]);
    expect(ctx.health.components()).toEqual({ backend: false });
    await cache.close();
  });

  it("lists every bad setting at once", () => {
    let error: unknown;
    try {
      build({
        MC_HOST_PORT: "good:1,nohost,bad:0",
        CACHE_KEY_PREFIX: "a b",
        MC_TLS: "true",
        MC_TLS_CACERT: "/nonexistent/ca.pem",
        MC_TLS_CLIENT_CERT: "/nonexistent/cert.pem",
      });
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(SettingsError);
    const problems = (error as SettingsError).problems;
    expect(problems).toHaveLength(6);
    expect(problems[0]).toMatch(/^MC_HOST_PORT: "nohost": expected host:port/);
    expect(problems[1]).toMatch(/^MC_HOST_PORT: "bad:0": expected host:port/);
    expect(problems[2]).toMatch(/^CACHE_KEY_PREFIX="a b": contains whitespace/);
    expect(problems[3]).toMatch(
      /^MC_TLS_CACERT="\/nonexistent\/ca.pem": cannot read the file/,
    );
    expect(problems[4]).toMatch(
      /^MC_TLS_CLIENT_CERT="\/nonexistent\/cert.pem": cannot read/,
    );
    expect(problems[5]).toBe(
      "MC_TLS_CLIENT_CERT and MC_TLS_CLIENT_KEY: expected both or neither",
    );
  });
});
