import { describe, expect, it } from "vitest";
import {
  parseConformanceArgs,
  UsageError,
} from "../../../src/conformance/options.js";

const seed = (): number => 7;

describe("parseConformanceArgs", () => {
  it("reads launch mode with its defaults", () => {
    expect(parseConformanceArgs(["--launch", "bin/ratelimit"], seed)).toEqual({
      kind: "run",
      options: {
        mode: {
          kind: "launch",
          command: "bin/ratelimit",
          flavour: "neutral",
          backend: "kv",
        },
        only: [],
        seed: 7,
        concurrency: 4,
        parallel: 3,
        reloadTimeoutMs: 10_000,
      },
    });
  });

  it("reads running mode, --only (repeated), --seed and --json", () => {
    const parsed = parseConformanceArgs(
      [
        "--target",
        "127.0.0.1:8081",
        "--http",
        "127.0.0.1:8080",
        "--config-dir",
        "/srv/config",
        "--only",
        "wildcards",
        "--only",
        "json endpoint",
        "--seed",
        "42",
        "--json",
        "out.json",
      ],
      seed,
    );
    expect(parsed).toMatchObject({
      kind: "run",
      options: {
        mode: {
          kind: "running",
          grpc: "127.0.0.1:8081",
          http: "127.0.0.1:8080",
          configDir: "/srv/config",
        },
        only: ["wildcards", "json endpoint"],
        seed: 42,
        json: "out.json",
      },
    });
  });

  it.each([
    [["--help"], "help"],
    [["-h"], "help"],
    [["--list"], "list"],
    [["--version"], "version"],
  ])("%j asks for %s", (argv, kind) => {
    expect(parseConformanceArgs(argv, seed)).toEqual({ kind });
  });

  it.each([
    [[], "give --launch"],
    [["--launch", "x", "--target", "h:1"], "exclude each other"],
    [["--launch", " "], "needs a command"],
    [["--launch", "x", "--flavor", "go"], "--flavor must be"],
    [["--launch", "x", "--backend", "redis"], "--backend must be"],
    [
      ["--launch", "x", "--flavor", "reference", "--backend", "memory"],
      "no memory backend",
    ],
    [["--target", "h:1"], "needs --config-dir"],
    [["--target", "h", "--config-dir", "d"], "--target must be host:port"],
    [
      ["--target", "h:1", "--config-dir", "d", "--backend", "kv"],
      "--launch only",
    ],
    [["--launch", "x", "--seed=-1"], "--seed must be an integer >= 0"],
    [["--launch", "x", "--seed", "1.5"], "--seed must be"],
    [["--launch", "x", "--concurrency", "0"], "--concurrency must be"],
    [["--launch", "x", "--bogus"], "bogus"],
  ])("refuses %j naming the problem", (argv, message) => {
    expect(() => parseConformanceArgs(argv, seed)).toThrow(UsageError);
    expect(() => parseConformanceArgs(argv, seed)).toThrow(message);
  });
});
