import { describe, expect, it } from "vitest";
import { SettingsError } from "../../../src/settings/settings-error.js";

describe("SettingsError", () => {
  it("lists each problem on its own line under a count", () => {
    const err = new SettingsError([
      'PORT="x": expected an integer',
      'SHADOW_MODE="": expected a boolean',
    ]);
    expect(err.message).toBe(
      'invalid settings (2 problems):\n  PORT="x": expected an integer\n  SHADOW_MODE="": expected a boolean',
    );
    expect(err.name).toBe("SettingsError");
    expect(err.code).toBe("RLS_SETTINGS");
    expect(err).toBeInstanceOf(Error);
  });

  it("says problem in the singular for one", () => {
    expect(new SettingsError(["A"]).message).toBe(
      "invalid settings (1 problem):\n  A",
    );
  });

  it("keeps a frozen copy of the problems and the cause", () => {
    const problems = ["A"];
    const cause = new Error("root");
    const err = new SettingsError(problems, { cause });
    problems.push("B");
    expect(err.problems).toEqual(["A"]);
    expect(Object.isFrozen(err.problems)).toBe(true);
    expect(err.cause).toBe(cause);
  });
});
