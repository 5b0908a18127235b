import type {
  RateLimitDescriptor,
  RateLimitDescriptor_RateLimitOverride,
} from "../proto.js";
import type { StatsManager } from "../stats/stats-manager.js";
import { fixedEpochWindow } from "./algorithm.js";
import { ConfigError } from "./config-error.js";
import {
  failureModes as allFailureModes,
  isFailureMode,
  type FailureMode,
} from "./failure-mode.js";
import {
  createDescriptorLevel,
  dumpDescriptors,
  loadDescriptors,
} from "./descriptor-compile.js";
import { findRateLimit } from "./descriptor-lookup.js";
import { nearestName } from "./nearest-name.js";
import { parseConfigFile } from "./parse-config-file.js";
import type {
  ConfigView,
  DescriptorLevel,
  RateLimit,
  RateLimitConfig,
} from "./rate-limit-config.js";
import { sourceLine } from "./source-lines.js";
import { unitFromNumber, unitToSeconds } from "./units.js";
import type { ChargeMode, YamlRoot } from "./yaml-types.js";

/** One named config text: for the file provider the runtime key (e.g. `config.basic.yaml`). */
export interface ConfigFile {
  readonly name: string;
  readonly text: string;
}

/**
 * One already-decoded config source: a parsed YAML file or an xDS `RateLimitConfig` resource
 * mapped to the YAML shape. `name` prefixes every error (the resource name for xDS).
 */
export interface NamedYamlRoot {
  readonly name: string;
  readonly root: YamlRoot;
  /** xDS `version_info` of the resource, kept as each rule's source (Explain, console). */
  readonly version?: string | undefined;
}

/** Options of {@link loadConfig} and {@link loadConfigFromRoots}. */
export interface LoadConfigOptions {
  /** Creates the stats handles of each rate limit at load time. */
  readonly statsManager: StatsManager;
  /** Allow several files for one domain (`MERGE_DOMAIN_CONFIG`). @defaultValue false */
  readonly mergeDomainConfig?: boolean;
  /**
   * Charge mode of domains whose config has no `charge:` (`CHARGE_MODE`): `each` is the
   * reference's behaviour. @defaultValue "each"
   */
  readonly chargeMode?: ChargeMode;
}

/**
 * Parses and validates every file and builds one immutable config (all-or-nothing). Every file
 * is parsed before any is loaded, as upstream's file provider does, so a YAML error in a later
 * file is reported before a rule error in an earlier one.
 *
 * @param files - in load order; with `mergeDomainConfig` that order decides which file a
 *   duplicate-key error names
 * @throws {@link ConfigError} with `<file name>: <problem>` for the first invalid file
 *   (problem texts of docs/reference-parity.md#config-errors)
 */
export function loadConfig(
  files: readonly ConfigFile[],
  options: LoadConfigOptions,
): RateLimitConfig {
  const roots = files.map((file) => ({
    name: file.name,
    root: parseConfigFile(file.name, file.text),
  }));
  return loadConfigFromRoots(roots, options);
}

/**
 * Validates decoded config sources and builds one immutable config (all-or-nothing); the entry
 * point of the xDS provider, whose resources skip the YAML key check. Per source, in order: the
 * domain must be non-empty and, unless merging, new; then its rules are validated depth-first
 * (upstream `config_impl.go` `NewRateLimitConfigImpl` / `loadConfig`,
 * docs/reference-parity.md#config-errors and #domain-merge). With `mergeDomainConfig`, a source
 * naming a loaded domain adds its top-level rules after the existing ones (wildcards too); the same
 * top-level composite key twice is still an error.
 *
 * @throws {@link ConfigError} `<name>: <problem>`: `config file cannot have empty domain`,
 *   `duplicate domain '<domain>' in config file` (its hint names the source that defined the
 *   domain first), or a rule error of {@link loadDescriptors}
 */
export function loadConfigFromRoots(
  roots: readonly NamedYamlRoot[],
  options: LoadConfigOptions,
): RateLimitConfig {
  const merge = options.mergeDomainConfig ?? false;
  const domains = new Map<string, DescriptorLevel>();
  const failureModes = new Map<string, FailureMode>();
  const charges = domainChargeModes(roots, options.chargeMode ?? "each");
  // Where each domain was first defined: `<name>` or `<name>:<line>`.
  const firstDefined = new Map<string, string>();
  for (const { name, root, version } of roots) {
    const domainLine = sourceLine(root, "domain");
    if (root.domain === "") {
      throw new ConfigError(`${name}: config file cannot have empty domain`, {
        file: name,
        line: domainLine,
        fieldPath: "domain",
        hint: "set domain: to the domain Envoy sends",
      });
    }
    let level = domains.get(root.domain);
    if (level === undefined) {
      level = createDescriptorLevel();
      domains.set(root.domain, level);
      firstDefined.set(
        root.domain,
        domainLine === undefined ? name : `${name}:${domainLine}`,
      );
    } else if (!merge) {
      throw new ConfigError(
        `${name}: duplicate domain '${root.domain}' in config file`,
        {
          file: name,
          line: domainLine,
          fieldPath: "domain",
          hint: `first defined in ${firstDefined.get(root.domain) ?? "another file"}; to merge them set MERGE_DOMAIN_CONFIG=true (config check: -merge_domain_configs)`,
        },
      );
    }
    loadDescriptors(level, root.descriptors, `${root.domain}.`, {
      configName: name,
      statsManager: options.statsManager,
      sourceVersion: version,
      allOrNothing: charges.get(root.domain) === "all_or_nothing",
    });
    if (root.failureMode !== undefined)
      setFailureMode(failureModes, name, root, root.failureMode);
  }
  return new LoadedRateLimitConfig(
    domains,
    options.statsManager,
    charges,
    failureModes,
  );
}

/**
 * Records a domain's `failure_mode`; merged files of one domain must agree.
 *
 * @throws {@link ConfigError} for a value other than error, allow, deny or local, or a
 *   different value than an earlier file of the same domain set
 */
function setFailureMode(
  modes: Map<string, FailureMode>,
  name: string,
  root: YamlRoot,
  text: string,
): void {
  const domain = root.domain;
  const where = {
    file: name,
    line: sourceLine(root, "failure_mode"),
    fieldPath: "failure_mode",
  };
  if (!isFailureMode(text)) {
    const nearest = nearestName(text, allFailureModes);
    throw new ConfigError(
      `${name}: invalid failure_mode '${text}' for domain '${domain}' (expected one of ${allFailureModes.join(", ")})`,
      {
        ...where,
        hint: nearest === undefined ? undefined : `did you mean '${nearest}'?`,
      },
    );
  }
  const earlier = modes.get(domain);
  if (earlier !== undefined && earlier !== text) {
    throw new ConfigError(
      `${name}: failure_mode '${text}' for domain '${domain}' conflicts with '${earlier}' set by an earlier file`,
      where,
    );
  }
  modes.set(domain, text);
}

/**
 * The charge mode of every domain: its `charge:` (several merged files of one domain must not
 * disagree), else `defaultMode`.
 *
 * @throws {@link ConfigError} `<name>: conflicting charge '<a>' for domain '<d>' (another file says '<b>')`
 */
function domainChargeModes(
  roots: readonly NamedYamlRoot[],
  defaultMode: ChargeMode,
): Map<string, ChargeMode> {
  const explicit = new Map<string, ChargeMode>();
  for (const { name, root } of roots) {
    const charge = root.charge;
    if (charge === undefined) continue;
    const other = explicit.get(root.domain);
    if (other !== undefined && other !== charge) {
      throw new ConfigError(
        `${name}: conflicting charge '${charge}' for domain '${root.domain}' (another file says '${other}')`,
        { file: name, line: sourceLine(root, "charge"), fieldPath: "charge" },
      );
    }
    explicit.set(root.domain, charge);
  }
  const modes = new Map<string, ChargeMode>();
  for (const { root } of roots) {
    modes.set(root.domain, explicit.get(root.domain) ?? defaultMode);
  }
  return modes;
}

/** The {@link RateLimitConfig} built by a successful load; immutable. */
class LoadedRateLimitConfig implements RateLimitConfig {
  readonly domainCount: number;
  readonly domains: readonly string[];

  readonly failureModes: ReadonlyMap<string, FailureMode>;
  readonly view: ConfigView;
  private readonly domainLevels: ReadonlyMap<string, DescriptorLevel>;
  private readonly statsManager: StatsManager;
  private readonly charges: ReadonlyMap<string, ChargeMode>;

  constructor(
    domainLevels: ReadonlyMap<string, DescriptorLevel>,
    statsManager: StatsManager,
    charges: ReadonlyMap<string, ChargeMode>,
    failureModes: ReadonlyMap<string, FailureMode>,
  ) {
    this.domainLevels = domainLevels;
    this.statsManager = statsManager;
    this.charges = charges;
    this.failureModes = failureModes;
    this.domainCount = domainLevels.size;
    this.domains = Object.freeze([...domainLevels.keys()].sort());
    this.view = Object.freeze({
      domainRules: (domain: string) => domainLevels.get(domain),
      overrideLimit: (
        domain: string,
        descriptor: RateLimitDescriptor,
        override: RateLimitDescriptor_RateLimitOverride,
      ) => this.overrideLimit(domain, descriptor, override),
    });
    Object.freeze(this);
  }

  /** Same order of checks as upstream `config_impl.go` `GetLimit`. */
  getLimit(
    domain: string,
    descriptor: RateLimitDescriptor,
  ): RateLimit | undefined {
    const root = this.domainLevels.get(domain);
    if (root === undefined) {
      this.statsManager.domainNotFound(domain).add(1);
      return undefined;
    }
    const override = descriptor.limit;
    if (override !== undefined) {
      return this.overrideLimit(domain, descriptor, override);
    }
    return findRateLimit(root, domain, descriptor.entries, this.statsManager);
  }

  /**
   * A request-supplied limit replaces config matching (docs/reference-parity.md#limit-override):
   * stats key `<domain>.` + entries joined by `.` (`key_value`, or `key` for an empty value); no
   * shadow, quota or detailed mode, no name, replaces or metadata. The override's unit enum
   * (`envoy.type.v3.RateLimitUnit`) is numbered like the response unit and cast as is.
   */
  private overrideLimit(
    domain: string,
    descriptor: RateLimitDescriptor,
    override: RateLimitDescriptor_RateLimitOverride,
  ): RateLimit {
    let statsKey = domain + ".";
    let first = true;
    for (const entry of descriptor.entries) {
      if (!first) statsKey += ".";
      first = false;
      statsKey +=
        entry.value === "" ? entry.key : entry.key + "_" + entry.value;
    }
    const unit = unitFromNumber(override.unit);
    return {
      fullKey: statsKey,
      stats: this.statsManager.requestRateLimitStats(domain, statsKey),
      requestsPerUnit: override.requestsPerUnit,
      unit,
      unitSeconds: unitToSeconds(unit),
      unitMultiplier: 1,
      windowSeconds: unitToSeconds(unit),
      algorithm: fixedEpochWindow(unitToSeconds(unit)),
      cacheKeySuffix: "",
      extraLimits: undefined,
      statsKeySuffix: "",
      allOrNothing: this.charges.get(domain) === "all_or_nothing",
      unlimited: false,
      shadowMode: false,
      quotaMode: false,
      name: "",
      replaces: noReplaces,
      detailedMetric: false,
      metadata: undefined,
      shareThresholdValues: undefined,
    };
  }

  /** Dump lines of every domain, domains sorted, rules depth-first in load order. */
  dump(): string {
    const lines: string[] = [];
    for (const domain of this.domains) {
      const level = this.domainLevels.get(domain);
      if (level !== undefined) dumpDescriptors(level, lines);
    }
    return lines.join("");
  }
}

const noReplaces: readonly string[] = Object.freeze([]);
