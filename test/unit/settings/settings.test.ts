import { describe, expect, it } from "vitest";
import { SettingsError } from "../../../src/settings/settings-error.js";
import {
  loadSettings,
  settingsDefaults,
  type LoadedSettings,
  type SettingsEnv,
} from "../../../src/settings/settings.js";

const fixedUUID = () => "00000000-0000-4000-8000-000000000000";

function load(env: SettingsEnv): LoadedSettings {
  return loadSettings(env, { randomUUID: fixedUUID });
}

function loadError(env: SettingsEnv): SettingsError {
  try {
    load(env);
  } catch (err) {
    if (err instanceof SettingsError) return err;
    throw err;
  }
  throw new Error("expected a SettingsError");
}

describe("loadSettings defaults", () => {
  const { settings } = load({});

  it("uses the reference's listener addresses", () => {
    expect(settings.host).toBe("0.0.0.0");
    expect(settings.port).toBe(8080);
    expect(settings.debugHost).toBe("0.0.0.0");
    expect(settings.debugPort).toBe(6070);
    expect(settings.grpcHost).toBe("0.0.0.0");
    expect(settings.grpcPort).toBe(8081);
    expect(settings.grpcUds).toBe("");
    expect(settings.grpcMaxConnectionAgeMs).toBe(24 * 3600 * 1000);
    expect(settings.grpcMaxConnectionAgeGraceMs).toBe(3600 * 1000);
    expect(settings.grpcServerUseTls).toBe(false);
    expect(settings.grpcClientTlsCacert).toBe("");
  });

  it("logs text at warn level", () => {
    expect(settings.logLevel).toBe("warn");
    expect(settings.logFormat).toBe("text");
  });

  it("loads files from the reference's runtime tree", () => {
    expect(settings.configType).toBe("FILE");
    expect(settings.forceStartWithoutInitialConfig).toBe(false);
    expect(settings.runtimeRoot).toBe("/srv/runtime_data/current");
    expect(settings.runtimeSubdirectory).toBe("");
    expect(settings.runtimeAppDirectory).toBe("config");
    expect(settings.runtimeIgnoreDotFiles).toBe(false);
    expect(settings.runtimeWatchRoot).toBe(true);
    expect(settings.mergeDomainConfig).toBe(false);
  });

  it("uses the xDS client defaults, with backoff jitter on", () => {
    expect(settings.xdsNodeId).toBe("default");
    expect(settings.xdsNodeMetadata).toEqual({});
    expect(settings.xdsServerUrl).toBe("localhost:18000");
    expect(settings.xdsServerConnectRetryIntervalMs).toBe(3000);
    expect(settings.xdsClientAdditionalHeaders).toEqual({});
    expect(settings.xdsClientBackoffInitialIntervalMs).toBe(10_000);
    expect(settings.xdsClientBackoffMaxIntervalMs).toBe(60_000);
    expect(settings.xdsClientBackoffRandomFactor).toBe(0.5);
    expect(settings.xdsClientBackoffJitter).toBe(true);
    expect(settings.xdsClientMaxMsgSizeBytes).toBe(0);
  });

  it("uses the reference's rate-limit behaviour", () => {
    expect(settings.backendType).toBe("kv");
    expect(settings.cacheKeyPrefix).toBe("");
    expect(settings.expirationJitterMaxSeconds).toBe(300);
    expect(settings.localCacheSizeBytes).toBe(0);
    expect(settings.nearLimitRatio).toBe(0.8);
    expect(settings.stopCacheKeyIncrementWhenOverlimit).toBe(false);
    expect(settings.shadowMode).toBe(false);
    expect(settings.quotaMode).toBe(false);
    expect(settings.responseDynamicMetadata).toBe(false);
    expect(settings.healthyWithAtLeastOneConfigLoaded).toBe(false);
    expect(settings.limitResponseHeadersEnabled).toBe(false);
    expect(settings.limitLimitHeader).toBe("RateLimit-Limit");
    expect(settings.limitRemainingHeader).toBe("RateLimit-Remaining");
    expect(settings.limitResetHeader).toBe("RateLimit-Reset");
  });

  it("uses the key-value store defaults", () => {
    expect(settings.kvSocketType).toBe("unix");
    expect(settings.kvType).toBe("single");
    expect(settings.kvUrl).toBe("/var/run/nutcracker/ratelimit.sock");
    expect(settings.kvPoolSize).toBe(10);
    expect(settings.kvTimeoutMs).toBe(10_000);
    expect(settings.kvPoolOnEmptyBehavior).toBe("CREATE");
    expect(settings.kvPoolOnEmptyWaitMs).toBe(1000);
    expect(settings.kvPipelineWindowMs).toBe(0);
    expect(settings.kvPipelineLimit).toBe(0);
    expect(settings.kvClusterPipelineParallelism).toBe(1);
    expect(settings.kvTls).toBe(false);
    expect(settings.kvAuth).toBe("");
    expect(settings.kvHealthCheckActiveConnection).toBe(false);
    expect(settings.kvStartupInitialIntervalMs).toBe(1000);
    expect(settings.kvStartupMaxIntervalMs).toBe(30_000);
    expect(settings.kvStartupMaxElapsedTimeMs).toBe(0);
    expect(settings.kvPerSecond).toBe(false);
    expect(settings.kvPerSecondUrl).toBe(
      "/var/run/nutcracker/ratelimitpersecond.sock",
    );
    expect(settings.kvPerSecondPoolSize).toBe(10);
    expect(settings.kvPerSecondTimeoutMs).toBe(10_000);
  });

  it("uses the memcached-protocol defaults", () => {
    expect(settings.mcHostPort).toEqual([]);
    expect(settings.mcSrv).toBe("");
    expect(settings.mcSrvRefreshMs).toBe(0);
    expect(settings.mcMaxIdleConns).toBe(2);
    expect(settings.mcTls).toBe(false);
  });

  it("pushes statistics every 10 s by default", () => {
    expect(settings.disableStats).toBe(false);
    expect(settings.statsFlushIntervalMs).toBe(10_000);
    expect(settings.extraTags).toEqual({});
    expect(settings.usePushStats).toBe(true);
    expect(settings.pushStatsHost).toBe("localhost");
    expect(settings.pushStatsPort).toBe(8125);
    expect(settings.pushStatsProtocol).toBe("tcp");
    expect(settings.useTaggedPushStats).toBe(false);
    expect(settings.taggedPushStatsMogrifiers).toEqual([]);
    expect(settings.usePullStats).toBe(false);
    expect(settings.pullStatsAddr).toBe(":9090");
    expect(settings.pullStatsPath).toBe("/metrics");
    expect(settings.pullStatsMapperYaml).toBe("");
    expect(settings.pullStatsResponseTimeAsMilliseconds).toBe(false);
    expect(settings.statsSink).toBe("pushstats");
  });

  it("disables tracing, sampling everything once enabled", () => {
    expect(settings.tracingEnabled).toBe(false);
    expect(settings.tracingExporterProtocol).toBe("http");
    expect(settings.tracingServiceName).toBe("RateLimit");
    expect(settings.tracingServiceNamespace).toBe("");
    expect(settings.tracingServiceInstanceId).toBe(fixedUUID());
    expect(settings.tracingSamplingRatio).toBe(1);
  });

  it("has a default for every field but the derived sink", () => {
    const read: Record<string, unknown> = {
      ...settings,
      tracingServiceInstanceId: "",
    };
    delete read["statsSink"];
    expect(read).toEqual(settingsDefaults);
  });

  it("draws a version-4 UUID from node:crypto when no generator is injected", () => {
    const { settings: a } = loadSettings({});
    const { settings: b } = loadSettings({ TRACING_SERVICE_INSTANCE_ID: "" });
    const v4 =
      /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
    expect(a.tracingServiceInstanceId).toMatch(v4);
    expect(b.tracingServiceInstanceId).toMatch(v4);
    expect(a.tracingServiceInstanceId).not.toBe(b.tracingServiceInstanceId);
  });
});

describe("loadSettings parsing", () => {
  it("reads each kind of value with the reference's syntax", () => {
    const { settings } = load({
      PORT: "0x1F90",
      GRPC_PORT: "0",
      DEBUG_PORT: "6_071",
      GRPC_MAX_CONNECTION_AGE: "1.5h",
      GRPC_MAX_CONNECTION_AGE_GRACE: "0",
      NEAR_LIMIT_RATIO: ".9",
      EXPIRATION_JITTER_MAX_SECONDS: "-1",
      LOCAL_CACHE_SIZE_IN_BYTES: "1048576",
      SHADOW_MODE: "T",
      RUNTIME_WATCH_ROOT: "0",
      EXTRA_TAGS: "env:prod,zone:a",
      MC_HOST_PORT: "a:11211,b:11211",
      XDS_CLIENT_BACKOFF_RANDOM_FACTOR: "2",
      CONFIG_GRPC_XDS_NODE_METADATA: "cluster=edge,ignored,expr=a=b",
      CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: "authorization:Bearer abc",
      TRACING_SERVICE_INSTANCE_ID: "instance-7",
      TRACING_SAMPLING_RATE: "0.25",
    });
    expect(settings.port).toBe(8080);
    expect(settings.grpcPort).toBe(0);
    expect(settings.debugPort).toBe(6071);
    expect(settings.grpcMaxConnectionAgeMs).toBe(5_400_000);
    expect(settings.grpcMaxConnectionAgeGraceMs).toBe(0);
    expect(settings.nearLimitRatio).toBe(0.9);
    expect(settings.expirationJitterMaxSeconds).toBe(-1);
    expect(settings.localCacheSizeBytes).toBe(1_048_576);
    expect(settings.shadowMode).toBe(true);
    expect(settings.runtimeWatchRoot).toBe(false);
    expect(settings.extraTags).toEqual({ env: "prod", zone: "a" });
    expect(settings.mcHostPort).toEqual(["a:11211", "b:11211"]);
    expect(settings.xdsClientBackoffRandomFactor).toBe(2);
    expect(settings.xdsNodeMetadata).toEqual({ cluster: "edge", expr: "a=b" });
    expect(settings.xdsClientAdditionalHeaders).toEqual({
      authorization: "Bearer abc",
    });
    expect(settings.tracingServiceInstanceId).toBe("instance-7");
    expect(settings.tracingSamplingRatio).toBe(0.25);
  });

  it.each([
    ["panic", "fatal"],
    ["FATAL", "fatal"],
    ["Error", "error"],
    ["warn", "warn"],
    ["WARNING", "warn"],
    ["info", "info"],
    ["DEBUG", "debug"],
    ["trace", "trace"],
  ])("maps LOG_LEVEL=%s to %s", (text, level) => {
    expect(load({ LOG_LEVEL: text }).settings.logLevel).toBe(level);
  });

  it.each([
    ["json", "json"],
    ["JSON", "json"],
    ["Json", "json"],
    ["text", "text"],
    ["", "text"],
    ["logfmt", "text"],
  ])("reads LOG_FORMAT=%j as %s", (text, format) => {
    expect(load({ LOG_FORMAT: text }).settings.logFormat).toBe(format);
  });

  it.each([
    ["builtin", "builtin"],
    ["", "builtin"],
    ["node", "node"],
    ["NODE", "node"],
  ])("reads GRPC_HTTP2_ENGINE=%j as %s", (text, engine) => {
    expect(load({ GRPC_HTTP2_ENGINE: text }).settings.grpcHttp2Engine).toBe(
      engine,
    );
  });

  it("rejects an unknown GRPC_HTTP2_ENGINE", () => {
    expect(loadError({ GRPC_HTTP2_ENGINE: "nghttp2" }).message).toContain(
      "GRPC_HTTP2_ENGINE",
    );
  });

  it.each([
    ["kv", "kv"],
    ["", "kv"],
    ["mc", "mc"],
    ["memory", "memory"],
  ])("reads BACKEND_TYPE=%j as %s", (text, backend) => {
    expect(
      load({ BACKEND_TYPE: text, MC_HOST_PORT: "h:1" }).settings.backendType,
    ).toBe(backend);
  });

  it("reads key-value store words in any case", () => {
    const { settings } = load({
      KV_TYPE: "Cluster",
      KV_PERSECOND_TYPE: "SENTINEL",
      KV_PERSECOND: "true",
      KV_PERSECOND_URL: "master,s1:26379",
      KV_POOL_ON_EMPTY_BEHAVIOR: "error",
      KV_PERSECOND_POOL_ON_EMPTY_BEHAVIOR: "Wait",
      KV_SOCKET_TYPE: "tcp",
    });
    expect(settings.kvType).toBe("cluster");
    expect(settings.kvPerSecondType).toBe("sentinel");
    expect(settings.kvPoolOnEmptyBehavior).toBe("ERROR");
    expect(settings.kvPerSecondPoolOnEmptyBehavior).toBe("WAIT");
    expect(settings.kvSocketType).toBe("tcp");
  });

  it.each(["tcp", "udp", "udp4", "udp6"])(
    "accepts PUSHSTATS_PROTOCOL=%s",
    (protocol) => {
      expect(
        load({ PUSHSTATS_PROTOCOL: protocol }).settings.pushStatsProtocol,
      ).toBe(protocol);
    },
  );

  it.each([
    ["http", "http"],
    ["grpc", "grpc"],
    ["", "http"],
  ])("reads TRACING_EXPORTER_PROTOCOL=%j as %s", (text, protocol) => {
    expect(
      load({ TRACING_EXPORTER_PROTOCOL: text }).settings
        .tracingExporterProtocol,
    ).toBe(protocol);
  });

  it("accepts the empty string for string, list and map variables", () => {
    const { settings } = load({
      HOST: "",
      CACHE_KEY_PREFIX: "",
      KV_URL: "",
      MC_HOST_PORT: "",
      EXTRA_TAGS: "",
      CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: "",
      CONFIG_GRPC_XDS_NODE_METADATA: "",
    });
    expect(settings.host).toBe("");
    expect(settings.cacheKeyPrefix).toBe("");
    expect(settings.kvUrl).toBe("");
    expect(settings.mcHostPort).toEqual([]);
    expect(settings.extraTags).toEqual({});
    expect(settings.xdsClientAdditionalHeaders).toEqual({});
    expect(settings.xdsNodeMetadata).toEqual({});
  });

  it.each([
    ["PORT", 'PORT="": expected an integer from 0 to 65535'],
    ["SHADOW_MODE", 'SHADOW_MODE="": expected a boolean'],
    [
      "STATS_FLUSH_INTERVAL",
      'STATS_FLUSH_INTERVAL="": expected a positive duration',
    ],
    ["KV_TIMEOUT", 'KV_TIMEOUT="": expected a non-negative duration'],
    ["NEAR_LIMIT_RATIO", 'NEAR_LIMIT_RATIO="": expected a number from 0 to 1'],
    [
      "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
      'XDS_CLIENT_BACKOFF_RANDOM_FACTOR="": expected a number',
    ],
    ["LOG_LEVEL", 'LOG_LEVEL="": expected one of panic'],
    ["CONFIG_TYPE", 'CONFIG_TYPE="": expected FILE or GRPC_XDS_SOTW'],
    ["KV_TYPE", 'KV_TYPE="": expected single, sentinel or cluster'],
    ["TRACING_ENABLED", 'TRACING_ENABLED="": expected true or false'],
  ])("reports %s set to the empty string as invalid", (name, problem) => {
    const err = loadError({ [name]: "", USE_PUSHSTATS: "false" });
    expect(err.problems).toHaveLength(1);
    expect(err.problems[0]).toContain(problem);
  });

  it.each([
    ["PORT", "65536"],
    ["PORT", "-1"],
    ["PUSHSTATS_PORT", "0"],
    ["KV_POOL_SIZE", "0"],
    ["KV_CLUSTER_PIPELINE_PARALLELISM", "-1"],
    ["MC_MAX_IDLE_CONNS", "-1"],
    ["LOCAL_CACHE_SIZE_IN_BYTES", "-1"],
    ["XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "-1"],
    ["NEAR_LIMIT_RATIO", "1.5"],
    ["TRACING_SAMPLING_RATE", "-0.5"],
    ["XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "-1"],
    ["STATS_FLUSH_INTERVAL", "0"],
    ["KV_TIMEOUT", "-1s"],
    ["MC_SRV_REFRESH", "10"],
    ["TRACING_ENABLED", "1"],
    ["TRACING_ENABLED", "TRUE"],
    ["TRACING_EXPORTER_PROTOCOL", "HTTP"],
    ["CONFIG_TYPE", "file"],
    ["BACKEND_TYPE", "KV"],
    ["BACKEND_TYPE", "memcached"],
    ["KV_SOCKET_TYPE", "udp"],
    ["KV_POOL_ON_EMPTY_BEHAVIOR", "BLOCK"],
    ["PUSHSTATS_PROTOCOL", "TCP"],
    ["LOG_LEVEL", "verbose"],
    ["CHARGE_MODE", "ALL_OR_NOTHING"],
    ["CHARGE_MODE", "all"],
  ])("rejects %s=%j", (name, value) => {
    const err = loadError({ [name]: value });
    expect(err.problems).toHaveLength(1);
    expect(err.problems[0]).toMatch(
      new RegExp(`^${name}=${JSON.stringify(value)}: .*expected `),
    );
  });
});

describe("loadSettings errors", () => {
  it("reports every bad variable in one error, in reading order", () => {
    const err = loadError({
      PORT: "http",
      GRPC_MAX_CONNECTION_AGE: "10",
      SHADOW_MODE: "yes",
      NEAR_LIMIT_RATIO: "2",
      EXTRA_TAGS: "a:b:c",
      KV_POOL_SIZE: "ten",
    });
    expect(err).toBeInstanceOf(SettingsError);
    expect(err.code).toBe("RLS_SETTINGS");
    expect(err.name).toBe("SettingsError");
    expect(err.problems).toEqual([
      'PORT="http": expected an integer from 0 to 65535',
      'GRPC_MAX_CONNECTION_AGE="10": expected a non-negative duration such as 300ms, 1.5h or 2h45m (units ns, us, µs, ms, s, m, h)',
      'NEAR_LIMIT_RATIO="2": out of range; expected a number from 0 to 1',
      'SHADOW_MODE="yes": expected a boolean: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false or False',
      'KV_POOL_SIZE="ten": expected a positive integer',
      'EXTRA_TAGS="a:b:c": invalid map item: "a:b:c"; expected comma-separated key:value pairs, each with exactly one ":"',
    ]);
    expect(err.message.split("\n")).toEqual([
      "invalid settings (6 problems):",
      ...err.problems.map((problem) => `  ${problem}`),
    ]);
  });

  it("reports parse problems and combination problems together", () => {
    const err = loadError({ PORT: "x", USE_PULLSTATS: "true" });
    expect(err.problems).toHaveLength(2);
    expect(err.problems[0]).toMatch(/^PORT=/);
    expect(err.problems[1]).toMatch(
      /^USE_PUSHSTATS=true and USE_PULLSTATS=true/,
    );
  });

  it("hides the value of the xDS headers, which may carry credentials", () => {
    const err = loadError({
      CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS: "authorization:Basic:s3cret",
    });
    expect(err.problems).toEqual([
      'CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS (value hidden): expected comma-separated key:value pairs, each with exactly one ":"',
    ]);
    expect(err.message).not.toContain("s3cret");
  });
});

describe("loadSettings combinations", () => {
  it("rejects a second stats sink while USE_PUSHSTATS keeps its default of true", () => {
    const err = loadError({ USE_TAGGED_PUSHSTATS: "true" });
    expect(err.problems).toEqual([
      "USE_TAGGED_PUSHSTATS=true and USE_PUSHSTATS=true (USE_PUSHSTATS is true by default): expected at most one statistics sink; set the others to false, e.g. USE_PUSHSTATS=false",
    ]);
  });

  it("rejects two sinks switched on explicitly", () => {
    const err = loadError({
      USE_PUSHSTATS: "false",
      USE_TAGGED_PUSHSTATS: "1",
      USE_PULLSTATS: "t",
    });
    expect(err.problems).toEqual([
      "USE_TAGGED_PUSHSTATS=true and USE_PULLSTATS=true: expected at most one statistics sink; set the others to false",
    ]);
  });

  it("names all three sinks when all are on", () => {
    const err = loadError({
      USE_TAGGED_PUSHSTATS: "true",
      USE_PULLSTATS: "true",
      USE_PUSHSTATS: "true",
    });
    expect(err.problems[0]).toMatch(
      /^USE_TAGGED_PUSHSTATS=true and USE_PUSHSTATS=true and USE_PULLSTATS=true: /,
    );
  });

  it.each([
    [{ USE_PUSHSTATS: "false", USE_PULLSTATS: "true" }, "pullstats"],
    [
      { USE_PUSHSTATS: "false", USE_TAGGED_PUSHSTATS: "true" },
      "tagged-pushstats",
    ],
    [{ USE_PUSHSTATS: "false" }, "log"],
    [
      {
        DISABLE_STATS: "true",
        USE_PULLSTATS: "true",
        USE_TAGGED_PUSHSTATS: "true",
      },
      "none",
    ],
  ] as const)("selects one sink from %j", (env, sink) => {
    expect(load(env).settings.statsSink).toBe(sink);
  });

  it("does not invent a sink conflict from a sink switch that failed to parse", () => {
    const err = loadError({ USE_PUSHSTATS: "yes", USE_PULLSTATS: "true" });
    expect(err.problems).toHaveLength(1);
    expect(err.problems[0]).toMatch(/^USE_PUSHSTATS="yes"/);
  });

  it("rejects MC_HOST_PORT and MC_SRV together with BACKEND_TYPE=mc", () => {
    const err = loadError({
      BACKEND_TYPE: "mc",
      MC_HOST_PORT: "a:1",
      MC_SRV: "_mc._tcp.example",
    });
    expect(err.problems).toEqual([
      'MC_HOST_PORT="a:1" and MC_SRV="_mc._tcp.example" are both set: expected only one of them with BACKEND_TYPE=mc',
    ]);
  });

  it("rejects BACKEND_TYPE=mc without MC_HOST_PORT or MC_SRV", () => {
    expect(
      loadError({ BACKEND_TYPE: "mc", MC_HOST_PORT: "" }).problems,
    ).toEqual([
      "MC_HOST_PORT and MC_SRV are both empty: expected one of them with BACKEND_TYPE=mc",
    ]);
  });

  it("rejects an MC_SRV that is not an SRV record name", () => {
    expect(
      loadError({ BACKEND_TYPE: "mc", MC_SRV: "memcached.example" }).problems,
    ).toEqual([
      'MC_SRV="memcached.example": expected an SRV record name _service._proto.name',
    ]);
    expect(
      load({ BACKEND_TYPE: "mc", MC_SRV: "_mc._tcp.example" }).settings.mcSrv,
    ).toBe("_mc._tcp.example");
  });

  it("ignores memcached-protocol node settings for other backends", () => {
    const { settings } = load({
      BACKEND_TYPE: "memory",
      MC_HOST_PORT: "a:1",
      MC_SRV: "x",
    });
    expect(settings.mcHostPort).toEqual(["a:1"]);
  });

  it("rejects GRPC_CLIENT_TLS_CACERT without GRPC_SERVER_USE_TLS", () => {
    expect(
      loadError({ GRPC_CLIENT_TLS_CACERT: "/etc/ca.pem" }).problems,
    ).toEqual([
      'GRPC_CLIENT_TLS_CACERT="/etc/ca.pem" needs GRPC_SERVER_USE_TLS=true: client certificates are only checked over TLS',
    ]);
  });

  it("rejects GRPC_SERVER_USE_TLS without certificate or key", () => {
    expect(loadError({ GRPC_SERVER_USE_TLS: "true" }).problems).toEqual([
      "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY: expected certificate and key file paths",
    ]);
    expect(
      loadError({ GRPC_SERVER_USE_TLS: "true", GRPC_SERVER_TLS_CERT: "/c.pem" })
        .problems,
    ).toEqual([
      "GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_KEY: expected certificate and key file paths",
    ]);
  });

  it("accepts mutual TLS with certificate, key and CA", () => {
    const { settings } = load({
      GRPC_SERVER_USE_TLS: "true",
      GRPC_SERVER_TLS_CERT: "/tls/cert.pem",
      GRPC_SERVER_TLS_KEY: "/tls/key.pem",
      GRPC_CLIENT_TLS_CACERT: "/tls/ca.pem",
      GRPC_CLIENT_TLS_SAN: "proxy.internal",
    });
    expect(settings.grpcServerUseTls).toBe(true);
    expect(settings.grpcClientTlsSan).toBe("proxy.internal");
  });

  it("rejects a sentinel KV_URL with fewer than 2 items, masking credentials", () => {
    expect(
      loadError({ KV_TYPE: "sentinel", KV_URL: "kv://user:pw@mymaster" })
        .problems,
    ).toEqual([
      'KV_URL="kv://*****@mymaster": expected <master name>,<sentinel host:port>[,…] (at least 2 items) with KV_TYPE=sentinel',
    ]);
    expect(
      load({ KV_TYPE: "sentinel", KV_URL: "mymaster,s1:26379" }).settings
        .kvType,
    ).toBe("sentinel");
  });

  it("rejects a host:port KV_URL read as a unix socket path, naming KV_SOCKET_TYPE=tcp", () => {
    expect(loadError({ KV_URL: "127.0.0.1:33283" }).problems).toEqual([
      'KV_URL="127.0.0.1:33283" looks like host:port, but KV_SOCKET_TYPE=unix (the default) reads it as a socket path: set KV_SOCKET_TYPE=tcp',
    ]);
    expect(
      loadError({
        KV_SOCKET_TYPE: "tcp",
        KV_PERSECOND: "true",
        KV_PERSECOND_URL: "[::1]:6380",
      }).problems,
    ).toEqual([
      'KV_PERSECOND_URL="[::1]:6380" looks like host:port, but KV_PERSECOND_SOCKET_TYPE=unix (the default) reads it as a socket path: set KV_PERSECOND_SOCKET_TYPE=tcp',
    ]);
    // Socket paths, tcp, other backends and other types are left alone.
    for (const env of [
      { KV_URL: "/run/redis/redis.sock" },
      { KV_URL: "127.0.0.1:6379", KV_SOCKET_TYPE: "tcp" },
      { KV_URL: "127.0.0.1:6379", BACKEND_TYPE: "memory" },
      { KV_URL: "127.0.0.1:7000,127.0.0.1:7001", KV_TYPE: "cluster" },
    ])
      expect(load(env).settings.kvUrl).toBe(env.KV_URL);
  });

  it("checks the per-second sentinel KV_PERSECOND_URL only when KV_PERSECOND is on", () => {
    expect(
      load({ KV_PERSECOND_TYPE: "sentinel" }).settings.kvPerSecondType,
    ).toBe("sentinel");
    expect(
      loadError({ KV_PERSECOND: "true", KV_PERSECOND_TYPE: "sentinel" })
        .problems[0],
    ).toMatch(/^KV_PERSECOND_URL=.*with KV_PERSECOND_TYPE=sentinel$/);
  });

  it("skips key-value store checks for other backends", () => {
    expect(
      load({ BACKEND_TYPE: "memory", KV_TYPE: "sentinel" }).settings.kvUrl,
    ).toBe("/var/run/nutcracker/ratelimit.sock");
  });
});

describe("loadSettings mogrifiers", () => {
  const tagged = { USE_PUSHSTATS: "false", USE_TAGGED_PUSHSTATS: "true" };

  it("reads the general spelling", () => {
    const { settings } = load({
      ...tagged,
      TAGGED_PUSHSTATS_MOGRIFIERS: "RATELIMIT,SERVER",
      TAGGED_PUSHSTATS_MOGRIFIERS_RATELIMIT_PATTERN:
        "^ratelimit\\.service\\.rate_limit\\.(.*)\\.(.*)$",
      TAGGED_PUSHSTATS_MOGRIFIERS_RATELIMIT_NAME:
        "ratelimit.service.rate_limit.$2",
      TAGGED_PUSHSTATS_MOGRIFIERS_RATELIMIT_TAGS: "domain:$1,kind:rl",
      TAGGED_PUSHSTATS_MOGRIFIERS_SERVER_PATTERN: "^ratelimit_server\\.(.*)$",
      TAGGED_PUSHSTATS_MOGRIFIERS_SERVER_NAME: "server.$1",
    });
    expect(settings.taggedPushStatsMogrifiers).toEqual([
      {
        name: "RATELIMIT",
        pattern: "^ratelimit\\.service\\.rate_limit\\.(.*)\\.(.*)$",
        metricName: "ratelimit.service.rate_limit.$2",
        tags: { domain: "$1", kind: "rl" },
      },
      {
        name: "SERVER",
        pattern: "^ratelimit_server\\.(.*)$",
        metricName: "server.$1",
        tags: {},
      },
    ]);
  });

  it("reads the worked-example spelling", () => {
    const { settings } = load({
      ...tagged,
      USE_TAGGED_PUSHSTATS_MOGRIFIERS: "SPECIFIC",
      TAGGED_PUSHSTATS_MOGRIFIER_SPECIFIC_PATTERN: "^a\\.(.*)$",
      TAGGED_PUSHSTATS_MOGRIFIER_SPECIFIC_NAME: "a",
      TAGGED_PUSHSTATS_MOGRIFIER_SPECIFIC_TAGS: "b:$1",
    });
    expect(settings.taggedPushStatsMogrifiers).toEqual([
      {
        name: "SPECIFIC",
        pattern: "^a\\.(.*)$",
        metricName: "a",
        tags: { b: "$1" },
      },
    ]);
  });

  it("mixes spellings per variable and accepts both when they agree", () => {
    const { settings } = load({
      ...tagged,
      TAGGED_PUSHSTATS_MOGRIFIERS: "M",
      USE_TAGGED_PUSHSTATS_MOGRIFIERS: "M",
      TAGGED_PUSHSTATS_MOGRIFIERS_M_PATTERN: "x",
      TAGGED_PUSHSTATS_MOGRIFIER_M_NAME: "y",
    });
    expect(settings.taggedPushStatsMogrifiers).toEqual([
      { name: "M", pattern: "x", metricName: "y", tags: {} },
    ]);
  });

  it("rejects two spellings that disagree", () => {
    const err = loadError({
      ...tagged,
      TAGGED_PUSHSTATS_MOGRIFIERS: "A",
      USE_TAGGED_PUSHSTATS_MOGRIFIERS: "B",
    });
    expect(err.problems).toEqual([
      'TAGGED_PUSHSTATS_MOGRIFIERS="A" and USE_TAGGED_PUSHSTATS_MOGRIFIERS="B" disagree: expected only one of these spellings, or both with the same value',
    ]);
    const perRule = loadError({
      ...tagged,
      TAGGED_PUSHSTATS_MOGRIFIERS: "M",
      TAGGED_PUSHSTATS_MOGRIFIERS_M_PATTERN: "x",
      TAGGED_PUSHSTATS_MOGRIFIER_M_PATTERN: "y",
      TAGGED_PUSHSTATS_MOGRIFIERS_M_NAME: "n",
    });
    expect(perRule.problems).toEqual([
      'TAGGED_PUSHSTATS_MOGRIFIERS_M_PATTERN="x" and TAGGED_PUSHSTATS_MOGRIFIER_M_PATTERN="y" disagree: expected only one of these spellings, or both with the same value',
    ]);
  });

  it("requires PATTERN and NAME, a compiling pattern and non-empty tags", () => {
    const err = loadError({
      ...tagged,
      TAGGED_PUSHSTATS_MOGRIFIERS: "A,B,C",
      TAGGED_PUSHSTATS_MOGRIFIERS_A_NAME: "a",
      TAGGED_PUSHSTATS_MOGRIFIERS_B_PATTERN: "(",
      TAGGED_PUSHSTATS_MOGRIFIERS_B_NAME: "",
      TAGGED_PUSHSTATS_MOGRIFIERS_C_PATTERN: "c",
      TAGGED_PUSHSTATS_MOGRIFIERS_C_NAME: "c",
      TAGGED_PUSHSTATS_MOGRIFIERS_C_TAGS: "k:,:v,bad",
    });
    expect(err.problems).toHaveLength(4);
    expect(err.problems[0]).toBe(
      'TAGGED_PUSHSTATS_MOGRIFIERS_A_PATTERN is not set: expected a regular expression for mogrifier "A"',
    );
    expect(err.problems[1]).toMatch(
      /^TAGGED_PUSHSTATS_MOGRIFIERS_B_PATTERN="\(": .+; expected a regular expression for mogrifier "B"$/,
    );
    expect(err.problems[2]).toBe(
      'TAGGED_PUSHSTATS_MOGRIFIERS_B_NAME is not set: expected a metric name for mogrifier "B"',
    );
    expect(err.problems[3]).toBe(
      'TAGGED_PUSHSTATS_MOGRIFIERS_C_TAGS="k:,:v,bad": invalid map item: "bad"; expected comma-separated key:value pairs, each with exactly one ":"',
    );
  });

  it("rejects a tag with an empty name or value", () => {
    const err = loadError({
      ...tagged,
      TAGGED_PUSHSTATS_MOGRIFIERS: "C",
      TAGGED_PUSHSTATS_MOGRIFIERS_C_PATTERN: "c",
      TAGGED_PUSHSTATS_MOGRIFIERS_C_NAME: "c",
      TAGGED_PUSHSTATS_MOGRIFIERS_C_TAGS: "k:,:v",
    });
    expect(err.problems).toEqual([
      'TAGGED_PUSHSTATS_MOGRIFIERS_C_TAGS="k:,:v": tag "k:" has an empty value; expected name:value pairs for mogrifier "C"',
      'TAGGED_PUSHSTATS_MOGRIFIERS_C_TAGS="k:,:v": tag ":v" has an empty name; expected name:value pairs for mogrifier "C"',
    ]);
  });

  it("does not read mogrifiers unless the tagged sink is in use", () => {
    const broken = { TAGGED_PUSHSTATS_MOGRIFIERS: "A" };
    expect(load(broken).settings.taggedPushStatsMogrifiers).toEqual([]);
    expect(
      load({ ...broken, ...tagged, DISABLE_STATS: "true" }).settings
        .taggedPushStatsMogrifiers,
    ).toEqual([]);
  });
});

describe("loadSettings result", () => {
  it("is deep-frozen", () => {
    const { settings } = load({
      USE_PUSHSTATS: "false",
      USE_TAGGED_PUSHSTATS: "true",
      TAGGED_PUSHSTATS_MOGRIFIERS: "M",
      TAGGED_PUSHSTATS_MOGRIFIERS_M_PATTERN: "x",
      TAGGED_PUSHSTATS_MOGRIFIERS_M_NAME: "y",
      TAGGED_PUSHSTATS_MOGRIFIERS_M_TAGS: "a:b",
      EXTRA_TAGS: "k:v",
      MC_HOST_PORT: "a:1",
    });
    expect(Object.isFrozen(settings)).toBe(true);
    expect(Object.isFrozen(settings.extraTags)).toBe(true);
    expect(Object.isFrozen(settings.mcHostPort)).toBe(true);
    expect(Object.isFrozen(settings.xdsNodeMetadata)).toBe(true);
    expect(Object.isFrozen(settings.taggedPushStatsMogrifiers)).toBe(true);
    expect(Object.isFrozen(settings.taggedPushStatsMogrifiers[0])).toBe(true);
    expect(Object.isFrozen(settings.taggedPushStatsMogrifiers[0]!.tags)).toBe(
      true,
    );
    expect(() => {
      (settings as { port: number }).port = 1;
    }).toThrow(TypeError);
    expect(() => {
      (settings.extraTags as Record<string, string>)["x"] = "y";
    }).toThrow(TypeError);
  });

  it("leaves the defaults table untouched and frozen", () => {
    load({ EXTRA_TAGS: "a:b", MC_HOST_PORT: "h:1" });
    expect(Object.isFrozen(settingsDefaults)).toBe(true);
    expect(Object.isFrozen(settingsDefaults.extraTags)).toBe(true);
    expect(Object.isFrozen(settingsDefaults.mcHostPort)).toBe(true);
    expect(settingsDefaults.extraTags).toEqual({});
    expect(settingsDefaults.mcHostPort).toEqual([]);
  });

  it("reads only the env object it is given", () => {
    const read = new Set<string>();
    const env = new Proxy<SettingsEnv>(
      {},
      {
        get(_target, name) {
          if (typeof name === "string") read.add(name);
          return undefined;
        },
      },
    );
    load(env);
    expect(read.has("PORT")).toBe(true);
    expect(read.has("KV_URL")).toBe(true);
    expect(load({}).settings.port).toBe(8080);
  });
});

describe("WORKERS", () => {
  it("defaults to one process and accepts up to 64 with a shared backend", () => {
    expect(loadSettings({ BACKEND_TYPE: "memory" }).settings.workers).toBe(1);
    expect(
      loadSettings({ BACKEND_TYPE: "kv", WORKERS: "2" }).settings.workers,
    ).toBe(2);
    expect(() => loadSettings({ BACKEND_TYPE: "kv", WORKERS: "65" })).toThrow(
      "WORKERS",
    );
    expect(() => loadSettings({ BACKEND_TYPE: "kv", WORKERS: "0" })).toThrow(
      "WORKERS",
    );
  });

  it("refuses several workers on the in-process memory backend", () => {
    expect(() =>
      loadSettings({ BACKEND_TYPE: "memory", WORKERS: "2" }),
    ).toThrow("WORKERS=2 with BACKEND_TYPE=memory");
  });
});

describe("WORKERS with pull statistics", () => {
  it("is refused: each worker would answer scrapes with its own counters", () => {
    expect(() =>
      loadSettings({
        BACKEND_TYPE: "kv",
        WORKERS: "2",
        USE_PUSHSTATS: "false",
        USE_PULLSTATS: "true",
      }),
    ).toThrow("WORKERS=2 with USE_PULLSTATS=true");
  });
});

describe("CHARGE_MODE", () => {
  it("defaults to each (the reference's behaviour) and reads all_or_nothing", () => {
    expect(load({}).settings.chargeMode).toBe("each");
    expect(load({ CHARGE_MODE: "each" }).settings.chargeMode).toBe("each");
    expect(load({ CHARGE_MODE: "all_or_nothing" }).settings.chargeMode).toBe(
      "all_or_nothing",
    );
  });
});
