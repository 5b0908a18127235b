import { anyIs, anyUnpack, type Any } from "@bufbuild/protobuf/wkt";
import type { Logger } from "pino";
import { ConfigError } from "../../config/config-error.js";
import type {
  ConfigUpdate,
  ConfigUpdateListener,
} from "../../config/config-update.js";
import type { NamedYamlRoot } from "../../config/load-config.js";
import type {
  ChargeMode,
  YamlAlgorithm,
  YamlDescriptor,
  YamlRateLimit,
  YamlRoot,
} from "../../config/yaml-types.js";
import {
  ConfigRateLimitConfigSchema,
  ConfigRateLimitUnit,
  ConfigRateLimitAlgorithm,
  ConfigChargeMode,
  type ConfigRateLimitConfig,
  type ConfigRateLimitDescriptor,
  type ConfigRateLimitPolicy,
  type DiscoveryResponse,
} from "../../proto.js";
import { createExponentialBackoff } from "../../util/backoff.js";
import type { ConfigProvider } from "../config-provider.js";
import {
  AdsStream,
  createAdsConnection,
  type AdsConnection,
  type AdsTlsOptions,
  type AdsVerdict,
  type ScheduleTimer,
} from "./ads-stream.js";
import { ConfigUpdateFanout } from "../config-update-fanout.js";

/**
 * Type URL of the rate-limit config resource, requested on the ADS stream and expected in every
 * `Any` (go-control-plane `resource.RateLimitConfigType`).
 */
export const rateLimitConfigTypeUrl =
  "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/** Reconnect backoff of the xDS client; see {@link createExponentialBackoff}. */
export interface XdsBackoffOptions {
  /**
   * First wait before reconnecting, in milliseconds, > 0 (`XDS_CLIENT_BACKOFF_INITIAL_INTERVAL`).
   * @defaultValue 10_000 (in settings)
   */
  readonly initialIntervalMs: number;
  /**
   * Largest wait, in milliseconds (`XDS_CLIENT_BACKOFF_MAX_INTERVAL`).
   * @defaultValue 60_000 (in settings)
   */
  readonly maxIntervalMs: number;
  /**
   * Jitter spread as a ratio of the wait, 0 … 1; above 1 counts as 1
   * (`XDS_CLIENT_BACKOFF_RANDOM_FACTOR`).
   * @defaultValue 0.5 (in settings)
   */
  readonly randomFactor: number;
  /** Randomise the waits (`XDS_CLIENT_BACKOFF_JITTER`). @defaultValue true (in settings) */
  readonly jitter: boolean;
}

/** Options of {@link createXdsProvider}. */
export interface XdsProviderOptions {
  /**
   * Management server address, `host:port` (`CONFIG_GRPC_XDS_SERVER_URL`).
   * @defaultValue "localhost:18000" (in settings)
   */
  readonly serverUrl: string;
  /** `Node.id` sent to the server (`CONFIG_GRPC_XDS_NODE_ID`). @defaultValue "default" (in settings) */
  readonly nodeId: string;
  /** `Node.metadata` string fields (`CONFIG_GRPC_XDS_NODE_METADATA`). @defaultValue \{\} */
  readonly nodeMetadata?: Readonly<Record<string, string>>;
  /**
   * Extra gRPC metadata on the stream (`CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS`); never logged.
   * @defaultValue \{\}
   */
  readonly additionalHeaders?: Readonly<Record<string, string>>;
  /** TLS towards the server; undefined for cleartext h2c (`CONFIG_GRPC_XDS_SERVER_USE_TLS`). */
  readonly tls?: AdsTlsOptions | undefined;
  /**
   * Largest response accepted, in bytes; 0 means grpc-go's 4 MiB (`XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`).
   * @defaultValue 0
   */
  readonly maxReceiveBytes?: number;
  /** Reconnect backoff. */
  readonly backoff: XdsBackoffOptions;
  /**
   * Turns the resources of one response into a config update (all or nothing). The app passes a
   * closure over `loadConfigFromRoots` (merge rule included) that returns a {@link ConfigError}
   * as `{ ok: false, error }`. If it throws anyway, the provider delivers a failed update.
   */
  readonly load: (roots: readonly NamedYamlRoot[]) => ConfigUpdate;
  /** Logger for the connection, received versions, ACKs and NACKs. */
  readonly logger: Logger;
  /** Uniform random numbers in [0, 1) for the backoff jitter. @defaultValue `Math.random` */
  readonly random?: () => number;
  /** Timer for the backoff waits; tests inject a fake. @defaultValue `setTimeout` */
  readonly schedule?: ScheduleTimer;
  /**
   * Opens one connection per attempt; tests inject an in-memory transport.
   * @defaultValue {@link createAdsConnection} with `serverUrl`, `tls` and `maxReceiveBytes`
   */
  readonly connect?: () => Promise<AdsConnection>;
}

/**
 * Creates the xDS config provider (`CONFIG_TYPE=GRPC_XDS_SOTW`; upstream
 * `xds_grpc_sotw_provider.go`): a state-of-the-world ADS client of `RateLimitConfig` resources
 * ({@link AdsStream}). Every response replaces the whole config: each resource is one domain
 * source named by the resource's `name`, a resource left out removes its domain, and an empty
 * list loads an empty config.
 *
 * A response whose resources do not decode, or whose load fails, is NACKed and delivered as
 * `{ ok: false }` (the service counts `config_load_error` and keeps the previous config); a
 * successful load is delivered, then ACKed. `start()` resolves once the first response has been
 * processed, either way, or when the provider is closed.
 *
 * Deliberate difference: the reference sends no event for an undecodable resource, so its
 * `config_load_error` misses that case; here it is a failed update like any other.
 *
 * @throws RangeError when the backoff options are out of range (see
 *   {@link createExponentialBackoff}); the app checks them first and reports a `SettingsError`
 */
export function createXdsProvider(options: XdsProviderOptions): ConfigProvider {
  return new XdsProvider(options);
}

/** ADS client delivering {@link ConfigUpdate}s; see {@link createXdsProvider}. */
export class XdsProvider implements ConfigProvider {
  private readonly options: XdsProviderOptions;
  private readonly logger: Logger;
  private readonly fanout: ConfigUpdateFanout;
  private readonly stream: AdsStream;
  private readonly firstProcessed: Promise<void>;
  private markFirstProcessed: () => void = () => undefined;
  private closing: Promise<void> | undefined;

  constructor(options: XdsProviderOptions) {
    this.options = options;
    this.logger = options.logger;
    this.fanout = new ConfigUpdateFanout(options.logger);
    this.firstProcessed = new Promise((resolve) => {
      this.markFirstProcessed = resolve;
    });
    const { backoff } = options;
    const connect =
      options.connect ??
      (() =>
        createAdsConnection({
          serverUrl: options.serverUrl,
          tls: options.tls,
          ...(options.maxReceiveBytes !== undefined
            ? { maxReceiveBytes: options.maxReceiveBytes }
            : {}),
        }));
    this.stream = new AdsStream({
      serverUrl: options.serverUrl,
      nodeId: options.nodeId,
      ...(options.nodeMetadata !== undefined
        ? { nodeMetadata: options.nodeMetadata }
        : {}),
      typeUrl: rateLimitConfigTypeUrl,
      ...(options.additionalHeaders !== undefined
        ? { headers: options.additionalHeaders }
        : {}),
      connect,
      backoff: createExponentialBackoff({
        initialIntervalMs: backoff.initialIntervalMs,
        maxIntervalMs: backoff.maxIntervalMs,
        randomFactor: backoff.randomFactor,
        jitter: backoff.jitter,
        random: options.random ?? Math.random,
      }),
      onResponse: (response) => this.handleResponse(response),
      logger: options.logger,
      ...(options.schedule !== undefined ? { schedule: options.schedule } : {}),
    });
  }

  subscribe(listener: ConfigUpdateListener): () => void {
    return this.fanout.subscribe(listener);
  }

  /** Starts the ADS client; resolves when the first response has been processed (or on close). */
  start(): Promise<void> {
    if (this.closing === undefined) this.stream.start();
    return this.firstProcessed;
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      this.markFirstProcessed();
      await this.stream.close();
    })();
    return this.closing;
  }

  private handleResponse(response: DiscoveryResponse): AdsVerdict {
    const update = this.toUpdate(response);
    if (this.closing === undefined) this.deliver(update);
    this.markFirstProcessed();
    return update.ok
      ? { ok: true }
      : { ok: false, message: update.error.message };
  }

  /** Decodes and loads the resources of one response; never throws. */
  private toUpdate(response: DiscoveryResponse): ConfigUpdate {
    const version = response.versionInfo;
    let roots: NamedYamlRoot[];
    try {
      roots = decodeRateLimitConfigs(response.resources).map((r) => ({
        ...r,
        version,
      }));
    } catch (err) {
      const error =
        err instanceof ConfigError
          ? err
          : new ConfigError(`cannot decode xds resources: ${String(err)}`, {
              cause: err,
            });
      this.logger.error(
        { err: error, version },
        "error while unmarshalling config from xds management server",
      );
      return { ok: false, error };
    }
    this.logger.info(
      { version, resources: roots.map((r) => r.name) },
      "received rate limit configuration from xds management server",
    );
    return this.loadSafely(roots);
  }

  private loadSafely(roots: readonly NamedYamlRoot[]): ConfigUpdate {
    return this.fanout.loadSafely(this.options.load, roots);
  }

  private deliver(update: ConfigUpdate): void {
    this.fanout.deliver(update);
  }
}

/**
 * Decodes every resource of a response as `ratelimit.config.ratelimit.v3.RateLimitConfig` and
 * maps it to a named config source, in response order (upstream `xds_grpc_sotw_provider.go`
 * `sendConfigs`: any failure rejects the whole response).
 *
 * @throws {@link ConfigError} `resources[<i>]: …` when a resource has another type URL or its
 *   bytes do not decode
 */
export function decodeRateLimitConfigs(
  resources: readonly Any[],
): NamedYamlRoot[] {
  return resources.map((resource, index) => {
    if (!anyIs(resource, ConfigRateLimitConfigSchema)) {
      throw new ConfigError(
        `resources[${index}]: unexpected type url '${resource.typeUrl}', want '${rateLimitConfigTypeUrl}'`,
      );
    }
    let config: ConfigRateLimitConfig | undefined;
    try {
      config = anyUnpack(resource, ConfigRateLimitConfigSchema);
    } catch (err) {
      const reason = err instanceof Error ? err.message : String(err);
      throw new ConfigError(
        `resources[${index}]: cannot decode ratelimit.config.ratelimit.v3.RateLimitConfig: ${reason}`,
        { cause: err },
      );
    }
    if (config === undefined) {
      // anyIs passed, so this cannot happen; kept for the type checker.
      throw new ConfigError(`resources[${index}]: cannot decode resource`);
    }
    return rateLimitConfigToYamlRoot(config);
  });
}

/**
 * Maps one `RateLimitConfig` resource to the YAML model, named by the resource's `name` (the
 * prefix of its load errors). Same mapping as upstream `config_xds.go`: every proto field is
 * carried (key, value, rate_limit with the unit as its enum name — `UNKNOWN` when unset, the
 * number for a value this build does not know — requests_per_unit, unlimited, name, replaces;
 * descriptors, shadow_mode, quota_mode, detailed_metric, metadata). `value_to_metric` and
 * `share_threshold` have no proto field and are always false. This service's extension fields
 * (numbers 1000+) carry `charge`, `algorithm` (TOKEN_BUCKET included), `unit_multiplier` (0
 * meaning 1), `burst` (0 meaning unset), `time_zone` and `week_start` ("" meaning unset) and a
 * descriptor's `rate_limits` list (empty meaning unset); the loader then checks them exactly as
 * the YAML fields, with the same errors and field paths.
 *
 * @throws {@link ConfigError} for a `charge` or `algorithm` number this build does not know
 */
export function rateLimitConfigToYamlRoot(
  config: ConfigRateLimitConfig,
): NamedYamlRoot {
  const descriptors = config.descriptors.map((descriptor) =>
    toYamlDescriptor(descriptor, config.name),
  );
  const charge = chargeModeOf(config.charge, config.name);
  const root: YamlRoot =
    charge === undefined
      ? { domain: config.domain, descriptors }
      : { domain: config.domain, descriptors, charge };
  return { name: config.name, root };
}

/**
 * The extension field `charge` (1000): unspecified → undefined (the global `CHARGE_MODE`).
 *
 * @throws {@link ConfigError} for a number this build does not know
 */
function chargeModeOf(
  charge: ConfigChargeMode,
  name: string,
): ChargeMode | undefined {
  switch (charge) {
    case ConfigChargeMode.CHARGE_MODE_UNSPECIFIED:
      return undefined;
    case ConfigChargeMode.EACH:
      return "each";
    case ConfigChargeMode.ALL_OR_NOTHING:
      return "all_or_nothing";
    default:
      throw new ConfigError(
        `${name}: invalid charge ${String(charge)} (expected EACH or ALL_OR_NOTHING)`,
      );
  }
}

/**
 * The extension field `algorithm` (1000): unspecified → undefined (fixed windows).
 *
 * @throws {@link ConfigError} for a number this build does not know
 */
function algorithmOf(
  algorithm: ConfigRateLimitAlgorithm,
  name: string,
): YamlAlgorithm | undefined {
  switch (algorithm) {
    case ConfigRateLimitAlgorithm.RATE_LIMIT_ALGORITHM_UNSPECIFIED:
      return undefined;
    case ConfigRateLimitAlgorithm.FIXED_WINDOW:
      return "fixed_window";
    case ConfigRateLimitAlgorithm.SLIDING_WINDOW:
      return "sliding_window";
    case ConfigRateLimitAlgorithm.TOKEN_BUCKET:
      return "token_bucket";
    default:
      throw new ConfigError(
        `${name}: invalid rate limit algorithm ${String(algorithm)} (expected FIXED_WINDOW, SLIDING_WINDOW or TOKEN_BUCKET)`,
      );
  }
}

/** Enum names by number (`MINUTE`, `UNKNOWN`, …). */
const unitNames: ReadonlyMap<number, string> = new Map(
  Object.entries(ConfigRateLimitUnit).flatMap(([name, value]) =>
    typeof value === "number" ? [[value, name] as const] : [],
  ),
);

function toYamlDescriptor(
  descriptor: ConfigRateLimitDescriptor,
  name: string,
): YamlDescriptor {
  const policy = descriptor.rateLimit;
  // Extension: an empty list is the unset field (proto3 cannot tell them apart).
  const rateLimits =
    descriptor.rateLimits.length === 0
      ? undefined
      : descriptor.rateLimits.map((entry) => toYamlRateLimit(entry, name));
  return {
    key: descriptor.key,
    value: descriptor.value,
    rateLimit: policy === undefined ? undefined : toYamlRateLimit(policy, name),
    ...(rateLimits !== undefined ? { rateLimits } : {}),
    descriptors: descriptor.descriptors.map((child) =>
      toYamlDescriptor(child, name),
    ),
    shadowMode: descriptor.shadowMode,
    quotaMode: descriptor.quotaMode,
    detailedMetric: descriptor.detailedMetric,
    valueToMetric: false,
    shareThreshold: false,
    metadata: descriptor.metadata,
  };
}

/** One `RateLimitPolicy` as a YAML `rate_limit` block; unset extension fields stay absent. */
function toYamlRateLimit(
  policy: ConfigRateLimitPolicy,
  name: string,
): YamlRateLimit {
  const algorithm = algorithmOf(policy.algorithm, name);
  return {
    // Go's enum String(): the name, or the number for a value outside the enum.
    unit: unitNames.get(policy.unit) ?? String(policy.unit),
    requestsPerUnit: policy.requestsPerUnit,
    unlimited: policy.unlimited,
    name: policy.name,
    replaces: policy.replaces.map((r) => ({ name: r.name })),
    // Extensions: 0 (unset) multiplier means 1, 0 burst means requests_per_unit, "" time zone
    // and week start mean unset.
    ...(algorithm !== undefined ? { algorithm } : {}),
    ...(policy.unitMultiplier > 1
      ? { unitMultiplier: policy.unitMultiplier }
      : {}),
    ...(policy.burst > 0 ? { burst: policy.burst } : {}),
    ...(policy.timeZone !== "" ? { timeZone: policy.timeZone } : {}),
    ...(policy.weekStart !== "" ? { weekStart: policy.weekStart } : {}),
  };
}
