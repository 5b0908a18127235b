import { describe, expect, it } from "vitest";
import { SettingsError } from "../../../src/settings/settings-error.js";
import { loadSettings } from "../../../src/settings/settings.js";

function problems(env: Record<string, string>): readonly string[] {
  try {
    loadSettings(env);
  } catch (err) {
    if (err instanceof SettingsError) return err.problems;
    throw err;
  }
  throw new Error("expected a SettingsError");
}

describe("BACKEND_FAILURE_* settings", () => {
  it("default to today's behaviour: error, 3 failures, 500 ms probes, full share", () => {
    const { settings } = loadSettings({});
    expect(settings.backendFailureMode).toBe("error");
    expect(settings.backendFailureThreshold).toBe(3);
    expect(settings.backendProbeIntervalMs).toBe(500);
    expect(settings.backendFailureLocalShare).toBe(1);
  });

  it("parse each value", () => {
    const { settings } = loadSettings({
      BACKEND_FAILURE_MODE: "local",
      BACKEND_FAILURE_THRESHOLD: "5",
      BACKEND_PROBE_INTERVAL: "1.5s",
      BACKEND_FAILURE_LOCAL_SHARE: "0.25",
    });
    expect(settings.backendFailureMode).toBe("local");
    expect(settings.backendFailureThreshold).toBe(5);
    expect(settings.backendProbeIntervalMs).toBe(1500);
    expect(settings.backendFailureLocalShare).toBe(0.25);
  });

  it("reject bad values, each named", () => {
    const found = problems({
      BACKEND_FAILURE_MODE: "open",
      BACKEND_FAILURE_THRESHOLD: "0",
      BACKEND_PROBE_INTERVAL: "0s",
      BACKEND_FAILURE_LOCAL_SHARE: "0",
    });
    expect(found).toHaveLength(4);
    for (const name of [
      "BACKEND_FAILURE_MODE",
      "BACKEND_FAILURE_THRESHOLD",
      "BACKEND_PROBE_INTERVAL",
      "BACKEND_FAILURE_LOCAL_SHARE",
    ])
      expect(found.some((p) => p.startsWith(`${name}=`))).toBe(true);
    expect(problems({ BACKEND_FAILURE_LOCAL_SHARE: "1.5" })[0]).toContain(
      "BACKEND_FAILURE_LOCAL_SHARE",
    );
  });
});
