import { create } from "@bufbuild/protobuf";
import { createRouterTransport } from "@connectrpc/connect";
import { silentLogger } from "../../../helpers/silent-logger.js";
import { afterEach, describe, expect, it } from "vitest";
import { ConfigError } from "../../../../src/config/config-error.js";
import type { ConfigUpdate } from "../../../../src/config/config-update.js";
import {
  loadConfigFromRoots,
  type NamedYamlRoot,
} from "../../../../src/config/load-config.js";
import type { ConfigProvider } from "../../../../src/provider/config-provider.js";
import {
  createXdsProvider,
  decodeRateLimitConfigs,
  rateLimitConfigToYamlRoot,
  rateLimitConfigTypeUrl,
} from "../../../../src/provider/xds/xds-provider.js";
import {
  ConfigRateLimitConfigSchema,
  ConfigRateLimitUnit,
} from "../../../../src/proto.js";
import { createStatsManager } from "../../../../src/stats/stats-manager.js";
import {
  createAdsManagement,
  rateLimitConfigResource,
  undecodableResource,
  type AdsManagement,
  type RecordedRequest,
} from "../../../helpers/ads-server.js";

describe("rateLimitConfigToYamlRoot", () => {
  it("carries every proto field into the YAML model", () => {
    const config = create(ConfigRateLimitConfigSchema, {
      name: "resource-a",
      domain: "a",
      descriptors: [
        {
          key: "k1",
          value: "v*",
          shadowMode: true,
          quotaMode: true,
          detailedMetric: true,
          metadata: { team: "rl", weight: 2, nested: { on: true } },
          rateLimit: {
            unit: ConfigRateLimitUnit.WEEK,
            requestsPerUnit: 7,
            name: "wk",
            replaces: [{ name: "other" }],
          },
          descriptors: [
            { key: "k2", rateLimit: { unlimited: true } },
            { key: "k3" },
          ],
        },
      ],
    });
    expect(rateLimitConfigToYamlRoot(config)).toEqual({
      name: "resource-a",
      root: {
        domain: "a",
        descriptors: [
          {
            key: "k1",
            value: "v*",
            rateLimit: {
              unit: "WEEK",
              requestsPerUnit: 7,
              unlimited: false,
              name: "wk",
              replaces: [{ name: "other" }],
            },
            descriptors: [
              {
                key: "k2",
                value: "",
                rateLimit: {
                  unit: "UNKNOWN",
                  requestsPerUnit: 0,
                  unlimited: true,
                  name: "",
                  replaces: [],
                },
                descriptors: [],
                shadowMode: false,
                quotaMode: false,
                detailedMetric: false,
                valueToMetric: false,
                shareThreshold: false,
                metadata: undefined,
              },
              {
                key: "k3",
                value: "",
                rateLimit: undefined,
                descriptors: [],
                shadowMode: false,
                quotaMode: false,
                detailedMetric: false,
                valueToMetric: false,
                shareThreshold: false,
                metadata: undefined,
              },
            ],
            shadowMode: true,
            quotaMode: true,
            detailedMetric: true,
            valueToMetric: false,
            shareThreshold: false,
            metadata: { team: "rl", weight: 2, nested: { on: true } },
          },
        ],
      },
    });
  });

  it("names a unit number outside the enum by the number, as Go's String() does", () => {
    const config = create(ConfigRateLimitConfigSchema, {
      name: "r",
      domain: "d",
      descriptors: [
        {
          key: "k",
          // A number from a newer proto: proto3 enums are open, so it decodes as is.
          // eslint-disable-next-line @typescript-eslint/no-unsafe-enum-assignment
          rateLimit: { unit: 42 as ConfigRateLimitUnit, requestsPerUnit: 1 },
        },
      ],
    });
    expect(
      rateLimitConfigToYamlRoot(config).root.descriptors[0]?.rateLimit?.unit,
    ).toBe("42");
  });
});

describe("decodeRateLimitConfigs", () => {
  it("decodes every resource in order", () => {
    const roots = decodeRateLimitConfigs([
      rateLimitConfigResource({ name: "one", domain: "d1" }),
      rateLimitConfigResource({ name: "two", domain: "d2" }),
    ]);
    expect(roots.map((r) => [r.name, r.root.domain])).toEqual([
      ["one", "d1"],
      ["two", "d2"],
    ]);
  });

  it("rejects a resource of another type", () => {
    expect(() =>
      decodeRateLimitConfigs([
        rateLimitConfigResource({ name: "one", domain: "d1" }),
        {
          $typeName: "google.protobuf.Any",
          typeUrl: "type.googleapis.com/google.protobuf.Empty",
          value: new Uint8Array(),
        },
      ]),
    ).toThrow(
      new ConfigError(
        `resources[1]: unexpected type url 'type.googleapis.com/google.protobuf.Empty', want '${rateLimitConfigTypeUrl}'`,
      ),
    );
  });

  it("rejects bytes that do not decode", () => {
    expect(() => decodeRateLimitConfigs([undecodableResource()])).toThrow(
      /^resources\[0\]: cannot decode ratelimit\.config\.ratelimit\.v3\.RateLimitConfig: /,
    );
  });
});

describe("xDS provider", () => {
  let provider: ConfigProvider | undefined;
  afterEach(async () => {
    await provider?.close();
    provider = undefined;
  });

  /** A provider over an in-memory management server with the real loader. */
  function setup(
    load: (roots: readonly NamedYamlRoot[]) => ConfigUpdate = realLoad(),
  ): {
    management: AdsManagement;
    updates: ConfigUpdate[];
    provider: ConfigProvider;
  } {
    const management = createAdsManagement();
    const updates: ConfigUpdate[] = [];
    const p = createXdsProvider({
      serverUrl: "in-memory",
      nodeId: "n",
      backoff: {
        initialIntervalMs: 10,
        maxIntervalMs: 40,
        randomFactor: 0.5,
        jitter: true,
      },
      load,
      logger: silentLogger(),
      random: () => 0.5,
      schedule: (callback) => {
        const timer = setImmediate(callback);
        return () => {
          clearImmediate(timer);
        };
      },
      connect: () =>
        Promise.resolve({
          transport: createRouterTransport(management.routes),
          connect: () => Promise.resolve(),
          close: () => undefined,
        }),
    });
    p.subscribe((update) => updates.push(update));
    provider = p;
    return { management, updates, provider: p };
  }

  function realLoad(mergeDomainConfig = false) {
    return (roots: readonly NamedYamlRoot[]): ConfigUpdate => {
      try {
        return {
          ok: true,
          config: loadConfigFromRoots(roots, {
            statsManager: createStatsManager(),
            mergeDomainConfig,
          }),
        };
      } catch (err) {
        if (err instanceof ConfigError) return { ok: false, error: err };
        throw err;
      }
    };
  }

  const byNonce = (nonce: string) => (r: RecordedRequest) =>
    r.request.responseNonce === nonce;

  const limit = (name: string, domain: string, requestsPerUnit = 1) =>
    rateLimitConfigResource({
      name,
      domain,
      descriptors: [
        {
          key: "k",
          rateLimit: { unit: ConfigRateLimitUnit.SECOND, requestsPerUnit },
        },
      ],
    });

  it("resolves start() once the first config has been delivered, then ACKs it", async () => {
    const { management, updates, provider: p } = setup();
    management.push("1", [limit("ra", "a"), limit("rb", "b")]);
    await p.start();
    expect(updates).toHaveLength(1);
    const update = updates[0]!;
    expect(update.ok && update.config.domains).toEqual(["a", "b"]);
    const ack = await management.waitForRequest(byNonce("1"), "ACK");
    expect(ack.request.versionInfo).toBe("1");
    expect(ack.request.errorDetail).toBeUndefined();
  });

  it("replaces the whole config with each response; an empty list loads an empty config", async () => {
    const { management, updates, provider: p } = setup();
    management.push("1", [limit("ra", "a"), limit("rb", "b")]);
    await p.start();
    management.push("2", [limit("rb", "b", 5)]);
    await management.waitForRequest(byNonce("2"), "ACK of 2");
    management.push("3", []);
    const ack = await management.waitForRequest(byNonce("3"), "ACK of 3");
    expect(ack.request.versionInfo).toBe("3");
    expect(
      updates.map((u) => (u.ok ? u.config.dump() : u.error.message)),
    ).toEqual([
      "a.k: unit=SECOND requests_per_unit=1, shadow_mode: false, quota_mode: false\n" +
        "b.k: unit=SECOND requests_per_unit=1, shadow_mode: false, quota_mode: false\n",
      "b.k: unit=SECOND requests_per_unit=5, shadow_mode: false, quota_mode: false\n",
      "",
    ]);
  });

  it("resolves start() after a failed first load, delivering the error and NACKing", async () => {
    const { management, updates, provider: p } = setup();
    management.push("1", [
      rateLimitConfigResource({ name: "bad", domain: "" }),
    ]);
    await p.start();
    expect(updates).toEqual([
      {
        ok: false,
        error: new ConfigError("bad: config file cannot have empty domain"),
      },
    ]);
    const nack = await management.waitForRequest(byNonce("1"), "NACK");
    expect(nack.request.versionInfo).toBe("");
    expect(nack.request.errorDetail?.message).toBe(
      "bad: config file cannot have empty domain",
    );
  });

  it("delivers an undecodable resource as a failed update and NACKs it", async () => {
    const { management, updates, provider: p } = setup();
    management.push("1", [limit("ra", "a")]);
    await p.start();
    management.push("2", [limit("ra", "a"), undecodableResource()]);
    const nack = await management.waitForRequest(byNonce("2"), "NACK");
    expect(nack.request.versionInfo).toBe("1");
    expect(nack.request.errorDetail?.message).toMatch(/^resources\[1\]: /);
    const last = updates.at(-1)!;
    expect(last.ok).toBe(false);
    expect(!last.ok && last.error).toBeInstanceOf(ConfigError);
  });

  it("rejects two resources of one domain unless MERGE_DOMAIN_CONFIG", async () => {
    const { management, updates, provider: p } = setup();
    management.push("1", [limit("r1", "a"), limit("r2", "a")]);
    await p.start();
    expect(!updates[0]!.ok && updates[0]!.error.message).toBe(
      "r2: duplicate domain 'a' in config file",
    );
    await p.close();

    const merged = setup(realLoad(true));
    merged.management.push("1", [
      limit("r1", "a"),
      rateLimitConfigResource({
        name: "r2",
        domain: "a",
        descriptors: [
          {
            key: "other",
            rateLimit: { unit: ConfigRateLimitUnit.MINUTE, requestsPerUnit: 3 },
          },
        ],
      }),
    ]);
    await merged.provider.start();
    const update = merged.updates[0]!;
    expect(update.ok && update.config.dump()).toContain(
      "a.other: unit=MINUTE requests_per_unit=3",
    );
  });

  it("turns a throwing load into a failed update and a NACK", async () => {
    const {
      management,
      updates,
      provider: p,
    } = setup(() => {
      throw new TypeError("boom");
    });
    management.push("1", []);
    await p.start();
    expect(!updates[0]!.ok && updates[0]!.error.message).toBe(
      "unexpected error loading config: boom",
    );
    const nack = await management.waitForRequest(byNonce("1"), "NACK");
    expect(nack.request.errorDetail?.message).toBe(
      "unexpected error loading config: boom",
    );
  });

  it("keeps delivering and ACKing when a listener throws", async () => {
    const { management, updates, provider: p } = setup();
    p.subscribe(() => {
      throw new Error("listener bug");
    });
    const second: ConfigUpdate[] = [];
    p.subscribe((u) => second.push(u));
    management.push("1", []);
    await p.start();
    await management.waitForRequest(byNonce("1"), "ACK");
    expect(updates).toHaveLength(1);
    expect(second).toHaveLength(1);
  });

  it("stops delivering to an unsubscribed listener", async () => {
    const { management, provider: p } = setup();
    const seen: ConfigUpdate[] = [];
    const unsubscribe = p.subscribe((u) => seen.push(u));
    unsubscribe();
    management.push("1", []);
    await p.start();
    expect(seen).toEqual([]);
  });

  it("close() releases a start() still waiting for the first response and is idempotent", async () => {
    const { updates, provider: p } = setup();
    const started = p.start();
    await p.close();
    await started;
    await p.close();
    expect(updates).toEqual([]);
  });
});
