import { describe, expect, it } from "vitest";
import { HealthChecker } from "../../../src/health/health.js";

describe("HealthChecker degraded components", () => {
  it("keeps a tolerated failing component from making the service unhealthy", () => {
    const health = new HealthChecker([{ name: "sigterm", healthy: true }]);
    const changes: boolean[] = [];
    health.onChange((healthy) => changes.push(healthy));
    health.register("backend", true);
    health.fail("backend");
    expect(health.isHealthy()).toBe(false);
    health.tolerate("backend");
    expect(health.isHealthy()).toBe(true);
    expect(health.degradedComponents()).toEqual(["backend"]);
    health.ok("backend");
    expect(health.degradedComponents()).toEqual([]);
    expect(changes).toEqual([false, true]);
  });

  it("reports components marked degraded without changing health", () => {
    const health = new HealthChecker([{ name: "sigterm", healthy: true }]);
    health.setDegraded("backend", true);
    expect(health.isHealthy()).toBe(true);
    expect(health.degradedComponents()).toEqual(["backend"]);
    health.setDegraded("backend", false);
    expect(health.degradedComponents()).toEqual([]);
    health.fail("sigterm");
    expect(health.isHealthy()).toBe(false);
  });
});
