import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { ConfigError } from "./config-error.js";
import type { ResolvedScalar } from "./yaml-scalar.js";
import { YamlDocumentError, formatGoScalar } from "./yaml-scalar.js";
import type {
  ChargeMode,
  YamlAlgorithm,
  YamlDescriptor,
  YamlRateLimit,
  YamlReplaces,
  YamlRoot,
} from "./yaml-types.js";
import { allowedYamlKeys, chargeModes, yamlAlgorithms } from "./yaml-types.js";
import {
  type GoMap,
  type GoNode,
  composeFirstDocument,
  formatGoValue,
  isGoString,
  isNull,
  maxVisitedNodes,
  typeError,
  unmarshalErrors,
} from "./yaml-v2-document.js";

/**
 * Go type names that yaml.v2 prints in `cannot unmarshal … into <type>` messages for the
 * reference's config structs (`config_impl.go`).
 */
const goTypes = {
  genericMap: "map[interface {}]interface {}",
  string: "string",
  bool: "bool",
  uint32: "uint32",
  descriptors: "[]config.YamlDescriptor",
  rateLimit: "config.YamlRateLimit",
  replacesList: "[]config.yamlReplaces",
  replaces: "config.yamlReplaces",
  metadata: "map[string]interface {}",
} as const;

/**
 * Parses one config file into its checked shape, reproducing the reference's two passes over
 * gopkg.in/yaml.v2 (upstream `config_impl.go` `ConfigFileContentToYaml`,
 * docs/reference-parity.md#config-parsing): YAML 1.1 scalars (`yes`/`on`/`y` are booleans, `0x1F`
 * is an integer, string fields keep the text as written), only the first document, then a key check
 * over the whole tree, then a typed decode. Per-domain rules (empty domain, units, duplicates …)
 * are checked later at load time.
 *
 * @param name - the config's name, prefixed to every error (for files the runtime key)
 * @param text - the YAML text
 * @returns the decoded file; missing fields take Go zero values ("" / false / empty list)
 * @throws {@link ConfigError} `<name>: <problem>`, the problem being one of
 *   `error loading config file: yaml: …` (syntax error, or `yaml: unmarshal errors:` followed by
 *   one `line <n>: cannot unmarshal …` line per bad field, e.g. a negative `requests_per_unit`),
 *   `config error, key is not of type string: <k>`, `config error, unknown key '<k>'`,
 *   `config error, yaml file contains list of type other than map: <elem>`, or
 *   `error checking config` (a float or over-int64 leaf).
 */
export function parseConfigFile(name: string, text: string): YamlRoot {
  try {
    return parseTwoPasses(text);
  } catch (error) {
    if (error instanceof FileProblem) {
      throw new ConfigError(`${name}: ${error.message}`);
    }
    if (error instanceof YamlDocumentError) {
      throw new ConfigError(
        `${name}: error loading config file: yaml: ${error.message}`,
      );
    }
    throw error;
  }
}

/** A problem with the file, without the `<name>: ` prefix. */
class FileProblem extends Error {
  override readonly name = "FileProblem";
}

function parseTwoPasses(text: string): YamlRoot {
  const root = composeFirstDocument(text);
  if (root !== undefined && root.kind !== "map") {
    // The first pass decodes into a generic map; anything else is an unmarshal error.
    const error = typeError(root, goTypes.genericMap);
    throw new FileProblem(
      `error loading config file: ${unmarshalErrors([error])}`,
    );
  }
  if (root !== undefined) {
    const problem = checkKeys(root, new Set(), { visited: 0 });
    if (problem !== undefined) throw new FileProblem(problem);
  }
  const decoder = new TypedDecoder();
  const decoded = decoder.root(root);
  if (decoder.errors.length > 0) {
    throw new FileProblem(
      `error loading config file: ${unmarshalErrors(decoder.errors)}`,
    );
  }
  return decoded;
}

// ---------------------------------------------------------------------------------------------
// First pass: key validation (upstream `config_impl.go` `validateYamlKeys`)

/**
 * Returns the first key problem in document order, or undefined. (Upstream walks a Go map, so
 * with several problems its choice is random; ours is the first in the file.)
 */
function checkKeys(
  map: GoMap,
  checked: Set<GoMap>,
  budget: { visited: number },
): string | undefined {
  // An aliased map is checked once.
  if (checked.has(map)) return undefined;
  checked.add(map);
  for (const { key, value } of map.entries) {
    if (++budget.visited > maxVisitedNodes) {
      return "error loading config file: yaml: document contains excessive aliasing";
    }
    if (key.kind !== "scalar" || !isGoString(key.resolved)) {
      return `config error, key is not of type string: ${formatGoValue(key)}`;
    }
    const keyText = formatGoScalar(key.resolved);
    if (!allowedYamlKeys.has(keyText)) {
      return `config error, unknown key '${keyText}'`;
    }
    // Metadata is free-form: nothing under it is checked.
    if (keyText === "metadata") continue;
    let problem: string | undefined;
    if (value.kind === "seq") {
      for (const element of value.items) {
        if (element.kind !== "map") {
          return `config error, yaml file contains list of type other than map: ${formatGoValue(element)}`;
        }
        problem = checkKeys(element, checked, budget);
        if (problem !== undefined) return problem;
      }
    } else if (value.kind === "map") {
      problem = checkKeys(value, checked, budget);
      if (problem !== undefined) return problem;
    } else if (
      keyText === "unit_multiplier" &&
      value.resolved.kind === "float"
    ) {
      // An extension field: a clear message instead of the reference's generic one.
      return `config error, line ${value.line}: invalid unit_multiplier '${value.text}' (expected an integer >= 1)`;
    } else if (!isAllowedLeaf(value.resolved)) {
      return "error checking config";
    }
  }
  return undefined;
}

/** Leaf types upstream accepts: string, int (int64 range), bool, nil. Floats are refused. */
function isAllowedLeaf(resolved: ResolvedScalar): boolean {
  switch (resolved.kind) {
    case "str":
    case "timestamp":
    case "binary":
    case "bool":
    case "null":
      return true;
    case "int":
      // Integers above int64 decode as uint64, which upstream's type switch does not accept.
      return resolved.value <= 9223372036854775807n;
    case "float":
      return false;
  }
}

// ---------------------------------------------------------------------------------------------
// Second pass: typed decode into the config structs, collecting every type error

/**
 * Decodes the checked tree into {@link YamlRoot} with yaml.v2's rules for typed targets: string
 * fields take the scalar's text, null gives the zero value, unknown keys are ignored, and every
 * type mismatch is collected as `line <n>: cannot unmarshal …`.
 */
class TypedDecoder {
  readonly errors: string[] = [];
  private visited = 0;

  root(node: GoMap | undefined): YamlRoot {
    let domain = "";
    let descriptors: readonly YamlDescriptor[] = [];
    let charge: ChargeMode | undefined;
    let failureMode: string | undefined;
    for (const { key, value } of this.fields(node)) {
      if (key === "domain") domain = this.string(value);
      else if (key === "descriptors") descriptors = this.descriptors(value);
      else if (key === "charge") charge = this.charge(value);
      else if (key === "failure_mode" && !isNull(value))
        failureMode = this.string(value);
    }
    return {
      domain,
      descriptors,
      ...(charge !== undefined ? { charge } : {}),
      ...(failureMode !== undefined ? { failureMode } : {}),
    };
  }

  /** `charge:` must be one of {@link chargeModes}; null means the default. */
  private charge(node: GoNode): ChargeMode | undefined {
    if (isNull(node)) return undefined;
    const text = this.string(node);
    const mode = chargeModes.find((m) => m === text);
    if (mode === undefined) {
      throw new FileProblem(
        `config error, line ${node.line}: invalid charge '${text}' (expected one of: ${chargeModes.join(", ")})`,
      );
    }
    return mode;
  }

  private descriptors(node: GoNode): readonly YamlDescriptor[] {
    return this.list(node, goTypes.descriptors, (item) =>
      this.descriptor(item),
    );
  }

  private descriptor(node: GoMap): YamlDescriptor {
    let key = "";
    let value = "";
    let rateLimit: YamlRateLimit | undefined;
    let descriptors: readonly YamlDescriptor[] = [];
    let shadowMode = false;
    let quotaMode = false;
    let detailedMetric = false;
    let valueToMetric = false;
    let shareThreshold = false;
    let metadata: JsonObject | undefined;
    for (const field of this.fields(node)) {
      const v = field.value;
      switch (field.key) {
        case "key":
          key = this.string(v);
          break;
        case "value":
          value = this.string(v);
          break;
        case "rate_limit":
          rateLimit = this.rateLimit(v);
          break;
        case "descriptors":
          descriptors = this.descriptors(v);
          break;
        case "shadow_mode":
          shadowMode = this.bool(v);
          break;
        case "quota_mode":
          quotaMode = this.bool(v);
          break;
        case "detailed_metric":
          detailedMetric = this.bool(v);
          break;
        case "value_to_metric":
          valueToMetric = this.bool(v);
          break;
        case "share_threshold":
          shareThreshold = this.bool(v);
          break;
        case "metadata":
          metadata = this.metadata(v);
          break;
        default:
          // Known keys in the wrong place (e.g. `domain` in a descriptor) are ignored.
          break;
      }
    }
    return {
      key,
      value,
      rateLimit,
      descriptors,
      shadowMode,
      quotaMode,
      detailedMetric,
      valueToMetric,
      shareThreshold,
      metadata,
      line: node.line,
    };
  }

  private rateLimit(node: GoNode): YamlRateLimit | undefined {
    if (isNull(node)) return undefined;
    if (node.kind !== "map") {
      this.errors.push(typeError(node, goTypes.rateLimit));
      return undefined;
    }
    let requestsPerUnit = 0;
    let unit = "";
    let unlimited = false;
    let name = "";
    let replaces: readonly YamlReplaces[] = [];
    let algorithm: YamlAlgorithm | undefined;
    let unitMultiplier: number | undefined;
    for (const { key, value } of this.fields(node)) {
      if (key === "requests_per_unit") requestsPerUnit = this.uint32(value);
      else if (key === "unit") unit = this.string(value);
      else if (key === "unlimited") unlimited = this.bool(value);
      else if (key === "name") name = this.string(value);
      else if (key === "replaces") {
        replaces = this.list(value, goTypes.replacesList, (item) =>
          this.replaces(item),
        );
      } else if (key === "algorithm") algorithm = this.algorithm(value);
      else if (key === "unit_multiplier")
        unitMultiplier = this.unitMultiplier(value);
    }
    return {
      requestsPerUnit,
      unit,
      unlimited,
      name,
      replaces,
      ...(algorithm !== undefined ? { algorithm } : {}),
      ...(unitMultiplier !== undefined ? { unitMultiplier } : {}),
    };
  }

  /** `algorithm:` must be one of {@link yamlAlgorithms}; null means the default. */
  private algorithm(node: GoNode): YamlAlgorithm | undefined {
    if (isNull(node)) return undefined;
    const text = this.string(node);
    const algorithm = yamlAlgorithms.find((a) => a === text);
    if (algorithm === undefined) {
      throw new FileProblem(
        `config error, line ${node.line}: invalid rate limit algorithm '${text}' (expected one of: ${yamlAlgorithms.join(", ")})`,
      );
    }
    return algorithm;
  }

  /** `unit_multiplier:` must be an integer in 1 … 4294967295; null means the default. */
  private unitMultiplier(node: GoNode): number | undefined {
    if (isNull(node)) return undefined;
    if (
      node.kind === "scalar" &&
      node.resolved.kind === "int" &&
      node.resolved.value >= 1n &&
      node.resolved.value <= 4294967295n
    ) {
      return Number(node.resolved.value);
    }
    const shown = node.kind === "scalar" ? node.text : `a ${node.kind}`;
    throw new FileProblem(
      `config error, line ${node.line}: invalid unit_multiplier '${shown}' (expected an integer >= 1)`,
    );
  }

  private replaces(node: GoMap): YamlReplaces {
    let name = "";
    for (const { key, value } of this.fields(node)) {
      if (key === "name") name = this.string(value);
    }
    return { name };
  }

  /** Struct fields by key text; the first pass guarantees string keys in config structs. */
  private *fields(
    node: GoMap | undefined,
  ): Generator<{ key: string; value: GoNode }> {
    if (node === undefined) return;
    for (const { key, value } of node.entries) {
      this.count();
      if (key.kind === "scalar") yield { key: key.text, value };
    }
  }

  private list<T>(
    node: GoNode,
    goType: string,
    decode: (item: GoMap) => T,
  ): readonly T[] {
    if (isNull(node)) return [];
    if (node.kind !== "seq") {
      this.errors.push(typeError(node, goType));
      return [];
    }
    const out: T[] = [];
    for (const item of node.items) {
      // The first pass guarantees list elements are maps.
      if (item.kind === "map") out.push(decode(item));
    }
    return out;
  }

  /** A string field takes the scalar's text as written (`yes`, `0x1F`, `123`); null is "". */
  private string(node: GoNode): string {
    if (node.kind !== "scalar") {
      this.errors.push(typeError(node, goTypes.string));
      return "";
    }
    const resolved = node.resolved;
    if (resolved.kind === "null") return "";
    return resolved.kind === "binary" ? resolved.value : node.text;
  }

  private bool(node: GoNode): boolean {
    if (node.kind === "scalar") {
      if (node.resolved.kind === "null") return false;
      if (node.resolved.kind === "bool") return node.resolved.value;
    }
    this.errors.push(typeError(node, goTypes.bool));
    return false;
  }

  /**
   * A uint32 field takes only an integer scalar in 0 … 4294967295. (yaml.v2 would also truncate
   * a float, but the first pass has already refused every float.)
   */
  private uint32(node: GoNode): number {
    if (node.kind === "scalar") {
      const resolved = node.resolved;
      if (resolved.kind === "null") return 0;
      if (
        resolved.kind === "int" &&
        resolved.value >= 0n &&
        resolved.value <= 4294967295n
      ) {
        return Number(resolved.value);
      }
    }
    this.errors.push(typeError(node, goTypes.uint32));
    return 0;
  }

  /**
   * Metadata decodes into `map[string]interface{}` and then becomes a protobuf `Struct`: top-level
   * keys are the key text, nested non-string keys are formatted as Go prints them, numbers are
   * doubles (docs/reference-parity.md#metadata).
   */
  private metadata(node: GoNode): JsonObject | undefined {
    if (isNull(node)) return undefined;
    if (node.kind !== "map") {
      this.errors.push(typeError(node, goTypes.metadata));
      return undefined;
    }
    const out: JsonObject = {};
    for (const { key, value } of node.entries) {
      this.count();
      const keyText = this.string(key);
      out[keyText] = this.json(value);
    }
    return out;
  }

  private json(node: GoNode): JsonValue {
    this.count();
    switch (node.kind) {
      case "seq":
        return node.items.map((item) => this.json(item));
      case "map": {
        const out: JsonObject = {};
        for (const { key, value } of node.entries)
          out[formatGoValue(key)] = this.json(value);
        return out;
      }
      case "scalar": {
        const resolved = node.resolved;
        switch (resolved.kind) {
          case "null":
            return null;
          case "bool":
          case "float":
            return resolved.value;
          case "int":
            return Number(resolved.value);
          case "str":
          case "timestamp":
          case "binary":
            return resolved.value;
        }
      }
    }
  }

  private count(): void {
    if (++this.visited > maxVisitedNodes) {
      throw new YamlDocumentError("document contains excessive aliasing");
    }
  }
}
