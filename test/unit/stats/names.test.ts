import { describe, expect, it } from "vitest";
import {
  sanitizeStatName,
  serializeTags,
  splitTags,
  withExtraTags,
} from "../../../src/stats/names.js";

describe("sanitizeStatName", () => {
  it("replaces : and | and the dots of IPv4 quads", () => {
    expect(sanitizeStatName("d.key_a:b|c")).toBe("d.key_a_b_c");
    expect(sanitizeStatName("d.remote_address_50.0.0.5")).toBe(
      "d.remote_address_50_0_0_5",
    );
  });
});

describe("serializeTags", () => {
  it("sorts by key, replaces . : | in values and drops empty tags", () => {
    expect(
      serializeTags([
        { key: "zone", value: "eu.west:1|a" },
        { key: "app", value: "rl" },
        { key: "", value: "x" },
        { key: "empty", value: "" },
      ]),
    ).toBe(".__app=rl.__zone=eu_west_1_a");
    expect(serializeTags([])).toBe("");
  });
});

describe("splitTags", () => {
  it("splits serialized tags off and drops malformed ones", () => {
    expect(splitTags("a.b.c.__k=v.__bad.__k2=v2")).toEqual({
      name: "a.b.c",
      tags: [
        { key: "k", value: "v" },
        { key: "k2", value: "v2" },
      ],
    });
    expect(splitTags("a.b")).toEqual({ name: "a.b", tags: [] });
  });
});

describe("withExtraTags", () => {
  it("merges extra tags with the name's own tags, own tags winning", () => {
    expect(
      withExtraTags("x.y.__code=ok", [
        { key: "env", value: "prod" },
        { key: "code", value: "ignored" },
      ]),
    ).toBe("x.y.__code=ok.__env=prod");
    expect(withExtraTags("x.y", [])).toBe("x.y");
  });
});
