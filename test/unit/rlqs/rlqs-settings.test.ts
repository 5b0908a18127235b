import { describe, expect, it } from "vitest";
import { SettingsError } from "../../../src/settings/settings-error.js";
import { loadSettings } from "../../../src/settings/settings.js";

describe("RLQS settings", () => {
  it("default to Envoy 1.40's 5 s reports, a 15 s TTL and abandon after 60 s", () => {
    const { settings } = loadSettings({});
    expect(settings.rlqsReportIntervalMs).toBe(5_000);
    expect(settings.rlqsAssignmentTtlMs).toBe(15_000);
    expect(settings.rlqsAbandonAfterMs).toBe(60_000);
  });

  it("parse Go durations of whole seconds", () => {
    const { settings } = loadSettings({
      RLQS_REPORT_INTERVAL: "2s",
      RLQS_ASSIGNMENT_TTL: "1m",
      RLQS_ABANDON_AFTER: "1h",
    });
    expect(settings.rlqsReportIntervalMs).toBe(2_000);
    expect(settings.rlqsAssignmentTtlMs).toBe(60_000);
    expect(settings.rlqsAbandonAfterMs).toBe(3_600_000);
  });

  it("refuse fractions of a second (Envoy truncates them) and zero, naming the variable", () => {
    expect(() => loadSettings({ RLQS_ASSIGNMENT_TTL: "1500ms" })).toThrow(
      SettingsError,
    );
    expect(() => loadSettings({ RLQS_ASSIGNMENT_TTL: "1500ms" })).toThrow(
      /RLQS_ASSIGNMENT_TTL.*not whole seconds/s,
    );
    expect(() => loadSettings({ RLQS_REPORT_INTERVAL: "0s" })).toThrow(
      /RLQS_REPORT_INTERVAL/,
    );
  });
});
