import { describe, expect, it } from "vitest";
import { SettingsError } from "../../../src/settings/settings-error.js";
import { loadSettings } from "../../../src/settings/settings.js";

describe("EXPLAIN_ENABLED and CORS_ALLOWED_ORIGINS", () => {
  it("default to off", () => {
    const { settings } = loadSettings({});
    expect(settings.explainEnabled).toBe(false);
    expect(settings.corsAllowedOrigins).toEqual([]);
  });

  it("parse a flag and a trimmed origin list", () => {
    const { settings } = loadSettings({
      EXPLAIN_ENABLED: "true",
      CORS_ALLOWED_ORIGINS:
        " https://app.example.com, http://127.0.0.1:3000 ,*,",
    });
    expect(settings.explainEnabled).toBe(true);
    expect(settings.corsAllowedOrigins).toEqual([
      "https://app.example.com",
      "http://127.0.0.1:3000",
      "*",
    ]);
  });

  it("refuse an origin with a path, naming the variable", () => {
    expect(() =>
      loadSettings({ CORS_ALLOWED_ORIGINS: "https://a.example.com/app" }),
    ).toThrow(SettingsError);
    expect(() =>
      loadSettings({ CORS_ALLOWED_ORIGINS: "https://a.example.com/app" }),
    ).toThrow(
      /CORS_ALLOWED_ORIGINS.*invalid origin "https:\/\/a.example.com\/app"/s,
    );
  });
});
