import { describe, expect, it } from "vitest";
import {
  durationFromUs,
  localRfc3339,
  timestampFromUs,
} from "../../../src/explain/explain-time.js";

describe("localRfc3339", () => {
  const at = (iso: string) => Date.parse(iso) / 1000;

  it("writes the local time with the zone's offset then, DST included", () => {
    expect(localRfc3339(at("2026-11-30T23:00:00Z"), "Europe/Berlin")).toBe(
      "2026-12-01T00:00:00+01:00",
    );
    expect(localRfc3339(at("2026-07-01T12:00:00Z"), "Europe/Berlin")).toBe(
      "2026-07-01T14:00:00+02:00",
    );
    expect(localRfc3339(at("2026-11-22T05:00:00Z"), "America/New_York")).toBe(
      "2026-11-22T00:00:00-05:00",
    );
    expect(localRfc3339(at("2026-01-01T00:00:00Z"), "Asia/Kolkata")).toBe(
      "2026-01-01T05:30:00+05:30",
    );
  });

  it("writes Z for a zero offset", () => {
    expect(localRfc3339(at("2026-12-01T00:00:00Z"), "UTC")).toBe(
      "2026-12-01T00:00:00Z",
    );
  });

  it("falls back to UTC for an offset of seconds (local mean time)", () => {
    // Amsterdam kept +00:19:32 until 1937.
    expect(localRfc3339(at("1930-01-01T00:00:00Z"), "Europe/Amsterdam")).toBe(
      "1930-01-01T00:00:00Z",
    );
  });
});

describe("durationFromUs and timestampFromUs", () => {
  it("split microseconds into seconds and nanoseconds", () => {
    expect(durationFromUs(1_250_000)).toMatchObject({
      seconds: 1n,
      nanos: 250_000_000,
    });
    expect(durationFromUs(-5)).toMatchObject({ seconds: 0n, nanos: 0 });
    expect(timestampFromUs(1_795_780_800_000_001)).toMatchObject({
      seconds: 1_795_780_800n,
      nanos: 1000,
    });
  });
});
