import { describe, expect, it } from "vitest";
import {
  KvOptionsError,
  maskKvUrl,
  parseKvAuth,
  parseKvUrl,
  resolveKvBackendOptions,
  resolveKvInstanceOptions,
} from "../../../../src/backends/kv/kv-options.js";
import { BackendError } from "../../../../src/limiter/backend-error.js";
import { createDecider } from "../../../../src/limiter/decide.js";
import { silentLogger } from "../../../helpers/silent-logger.js";
import { FakeClock } from "../../../helpers/fake-clock.js";

function optionsError(fn: () => unknown): KvOptionsError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(KvOptionsError);
    expect(err).toBeInstanceOf(BackendError);
    return err as KvOptionsError;
  }
  throw new Error("expected a KvOptionsError");
}

describe("parseKvAuth", () => {
  it.each([
    ["", undefined],
    ["secret", { password: "secret" }],
    ["user:secret", { username: "user", password: "secret" }],
    ["user:se:cret", { username: "user", password: "se:cret" }],
    [":secret", { username: "", password: "secret" }],
  ])("parses %j", (text, expected) => {
    expect(parseKvAuth(text)).toEqual(expected);
  });
});

describe("maskKvUrl", () => {
  it.each([
    ["127.0.0.1:6379", "127.0.0.1:6379"],
    ["redis://user:pass@h:1", "redis://*****@h:1"],
    ["redis://:pass@h:1/2", "redis://*****@h:1/2"],
    ["redis://h:1?password=pw&db=2", "redis://h:1?password=*****&db=2"],
    [
      "mymaster,redis://a:b@s1:26379,s2:26379",
      "mymaster,redis://*****@s1:26379,s2:26379",
    ],
    ["/var/run/redis.sock", "/var/run/redis.sock"],
  ])("masks %s", (url, masked) => {
    expect(maskKvUrl(url)).toBe(masked);
  });
});

describe("parseKvUrl", () => {
  it("reads host:port and [v6]:port for tcp", () => {
    expect(parseKvUrl("single", "tcp", "10.0.0.1:6380")).toEqual({
      kind: "tcp",
      host: "10.0.0.1",
      port: 6380,
    });
    expect(parseKvUrl("single", "tcp", "[::1]:6379")).toEqual({
      kind: "tcp",
      host: "::1",
      port: 6379,
    });
  });

  it("reads a socket path for unix", () => {
    expect(parseKvUrl("single", "unix", "/tmp/r.sock")).toEqual({
      kind: "unix",
      path: "/tmp/r.sock",
    });
  });

  it("reads credentials and database from redis:// URLs", () => {
    expect(parseKvUrl("single", "tcp", "redis://u:p%40ss@h:7000/3")).toEqual({
      kind: "tcp",
      host: "h",
      port: 7000,
      credentials: { username: "u", password: "p@ss" },
      db: 3,
    });
    expect(parseKvUrl("single", "unix", "redis://:pw@h")).toEqual({
      kind: "tcp",
      host: "h",
      port: 6379,
      credentials: { password: "pw" },
    });
    expect(
      parseKvUrl("single", "tcp", "redis://h:1?username=u&password=p&db=4"),
    ).toEqual({
      kind: "tcp",
      host: "h",
      port: 1,
      credentials: { username: "u", password: "p" },
      db: 4,
    });
    // A user without a password does not authenticate.
    expect(parseKvUrl("single", "tcp", "redis://u@h:1")).toEqual({
      kind: "tcp",
      host: "h",
      port: 1,
    });
  });

  it("reads sentinel and cluster lists", () => {
    expect(parseKvUrl("sentinel", "tcp", "mymaster,a:1,b:2")).toEqual({
      kind: "sentinel",
      masterName: "mymaster",
      sentinels: [
        { host: "a", port: 1 },
        { host: "b", port: 2 },
      ],
    });
    expect(parseKvUrl("cluster", "unix", "a:1,b:2")).toEqual({
      kind: "cluster",
      nodes: [
        { host: "a", port: 1 },
        { host: "b", port: 2 },
      ],
    });
  });

  it.each([
    ["single", "tcp", "localhost"],
    ["single", "tcp", "h:0"],
    ["single", "tcp", "h:70000"],
    ["single", "tcp", "rediss://h:1"],
    ["single", "tcp", "redis://h:1/x"],
    ["single", "unix", ""],
    ["sentinel", "tcp", "mymaster"],
    ["sentinel", "tcp", "mymaster,h"],
    ["cluster", "tcp", ""],
  ] as const)("rejects %s %s %j naming the url option", (type, socket, url) => {
    expect(optionsError(() => parseKvUrl(type, socket, url)).option).toBe(
      "url",
    );
  });

  it("never puts a password into an error message", () => {
    const err = optionsError(() =>
      parseKvUrl("single", "tcp", "redis://u:topsecret@h:1/notadb"),
    );
    expect(err.message).not.toContain("topsecret");
  });
});

describe("resolveKvInstanceOptions", () => {
  it("fills the spec's defaults", () => {
    const resolved = resolveKvInstanceOptions({ url: "/tmp/r.sock" });
    expect(resolved).toMatchObject({
      type: "single",
      socketType: "unix",
      target: { kind: "unix", path: "/tmp/r.sock" },
      poolSize: 10,
      timeoutMs: 10_000,
      poolOnEmptyBehavior: "CREATE",
      poolOnEmptyWaitMs: 1_000,
      pipelineWindowMs: 0,
      clusterPipelineParallelism: 1,
      tls: false,
      credentials: undefined,
      sentinelCredentials: undefined,
    });
  });

  it.each([
    [1, 10, 1],
    [0, 10, 10],
    [4, 10, 4],
    [40, 10, 10],
    [0, 3, 3],
  ])(
    "turns parallelism %i with pool size %i into %i, as upstream",
    (clusterPipelineParallelism, poolSize, expected) => {
      expect(
        resolveKvInstanceOptions({
          url: "a:1",
          type: "cluster",
          clusterPipelineParallelism,
          poolSize,
        }).clusterPipelineParallelism,
      ).toBe(expected);
    },
  );

  it("prefers KV_AUTH over URL credentials and masks the URL", () => {
    const resolved = resolveKvInstanceOptions({
      url: "redis://u:p@h:1",
      socketType: "tcp",
      auth: "other",
    });
    expect(resolved.credentials).toEqual({ password: "other" });
    expect(resolved.maskedUrl).toBe("redis://*****@h:1");
    expect(
      resolveKvInstanceOptions({ url: "redis://u:p@h:1" }).credentials,
    ).toEqual({ username: "u", password: "p" });
  });

  it.each([
    ["poolSize", { poolSize: 0 }],
    ["poolSize", { poolSize: 1.5 }],
    ["timeoutMs", { timeoutMs: -1 }],
    ["poolOnEmptyWaitMs", { poolOnEmptyWaitMs: Number.NaN }],
    ["pipelineWindowMs", { pipelineWindowMs: -0.5 }],
    ["clusterPipelineParallelism", { clusterPipelineParallelism: -1 }],
  ] as const)("rejects a bad %s", (option, extra) => {
    expect(
      optionsError(() => resolveKvInstanceOptions({ url: "h:1", ...extra }))
        .option,
    ).toBe(option);
  });
});

describe("resolveKvBackendOptions", () => {
  const common = {
    decider: createDecider({ clock: new FakeClock(0) }),
    logger: silentLogger(),
  };

  it("names the instance of a bad option", () => {
    const err = optionsError(() =>
      resolveKvBackendOptions({
        ...common,
        main: { url: "/tmp/a.sock" },
        perSecond: { url: "bad", socketType: "tcp" },
      }),
    );
    expect(err.instance).toBe("perSecond");
    expect(err.option).toBe("url");
  });

  it("fills the startup defaults and checks them", () => {
    expect(
      resolveKvBackendOptions({ ...common, main: { url: "/a" } }),
    ).toMatchObject({
      perSecond: undefined,
      healthCheckActiveConnection: false,
      startupInitialIntervalMs: 1000,
      startupMaxIntervalMs: 30_000,
      startupMaxElapsedTimeMs: 0,
    });
    expect(
      optionsError(() =>
        resolveKvBackendOptions({
          ...common,
          main: { url: "/a" },
          startupInitialIntervalMs: 0,
        }),
      ).option,
    ).toBe("startupInitialIntervalMs");
  });
});
