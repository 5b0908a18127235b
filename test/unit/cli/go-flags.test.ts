import { describe, expect, it } from "vitest";
import {
  FlagError,
  parseGoFlags,
  type FlagSpec,
} from "../../../src/cli/go-flags.js";

const specs = {
  name: { kind: "string", default: "", help: "a name" },
  on: { kind: "bool", help: "a switch" },
} as const satisfies Record<string, FlagSpec>;

describe("parseGoFlags", () => {
  it("returns the arguments after the flags as rest, from the first non-flag or after --", () => {
    expect(parseGoFlags(["-name", "a", "x", "-on"], specs).rest).toEqual([
      "x",
      "-on",
    ]);
    expect(parseGoFlags(["-on", "--", "-name"], specs).rest).toEqual(["-name"]);
    expect(parseGoFlags(["-on"], specs).rest).toEqual([]);
  });

  it("reads -version and --version, and -version=false as not asked", () => {
    expect(parseGoFlags(["-version"], specs).version).toBe(true);
    expect(parseGoFlags(["--version"], specs).version).toBe(true);
    expect(parseGoFlags(["-version=false"], specs).version).toBe(false);
    expect(parseGoFlags(["-on"], specs).version).toBe(false);
  });

  it("still refuses an unknown flag", () => {
    expect(() => parseGoFlags(["-nope"], specs)).toThrow(FlagError);
  });
});
