import { silentLogger } from "../../helpers/silent-logger.js";
import { KvCounterBackend } from "../../../src/backends/kv/kv-counter-backend.js";
import { describe, expect, it } from "vitest";
import type { AppContext } from "../../../src/app/app-context.js";
import { createKvCache } from "../../../src/app/kv-cache.js";
import { HealthChecker } from "../../../src/health/health.js";
import { createDecider } from "../../../src/limiter/decide.js";
import { SettingsError } from "../../../src/settings/settings-error.js";
import { loadSettings } from "../../../src/settings/settings.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";

function context(): AppContext {
  const clock = new FakeClock(0);
  return {
    logger: silentLogger(),
    clock,
    health: new HealthChecker([{ name: "sigterm", healthy: true }]),
    statsManager: createStatsManager(),
    decider: createDecider({ clock }),
    workerIndex: 0,
  };
}

function settingsError(env: Record<string, string>): SettingsError {
  const { settings } = loadSettings({ BACKEND_TYPE: "kv", ...env });
  try {
    createKvCache(settings, context());
  } catch (err) {
    expect(err).toBeInstanceOf(SettingsError);
    return err as SettingsError;
  }
  throw new Error("expected a SettingsError");
}

describe("createKvCache", () => {
  it("builds the backend without connecting and registers a healthy backend component", async () => {
    const ctx = context();
    const { settings } = loadSettings({
      BACKEND_TYPE: "kv",
      KV_SOCKET_TYPE: "tcp",
      KV_URL: "127.0.0.1:1",
      KV_PERSECOND: "true",
      KV_PERSECOND_URL: "/tmp/none.sock",
    });
    const cache = createKvCache(settings, ctx);
    expect(cache.backend).toBeInstanceOf(KvCounterBackend);
    expect(ctx.health.components()).toEqual({ sigterm: true, backend: true });
    await cache.close();
    await cache.close();
  });

  it("names the variable of an address that does not parse", () => {
    expect(
      settingsError({ KV_SOCKET_TYPE: "tcp", KV_URL: "nohostport" })
        .problems[0],
    ).toMatch(/^KV_URL: "nohostport": expected host:port/);
    expect(
      settingsError({
        KV_URL: "/tmp/a.sock",
        KV_PERSECOND: "true",
        KV_PERSECOND_SOCKET_TYPE: "tcp",
        KV_PERSECOND_URL: "redis://u:hidden@h:1/x",
      }).problems[0],
    ).toMatch(/^KV_PERSECOND_URL: "redis:\/\/\*\*\*\*\*@h:1\/x"/);
  });

  it("reads the TLS files only with TLS on, naming an unreadable one", () => {
    const { settings } = loadSettings({
      BACKEND_TYPE: "kv",
      KV_TLS_CACERT: "/nonexistent/ca.pem",
    });
    const cache = createKvCache(settings, context());
    void cache.close();
    expect(
      settingsError({ KV_TLS: "true", KV_TLS_CACERT: "/nonexistent/ca.pem" })
        .problems[0],
    ).toMatch(/^KV_TLS_CACERT="\/nonexistent\/ca\.pem": cannot read the file/);
  });
});
