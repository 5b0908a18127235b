import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import { ConfigError, type ConfigErrorOptions } from "./config-error.js";
import { nearestName } from "./nearest-name.js";
import { recordSourceLines } from "./source-lines.js";
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
  rateLimitList: "[]config.YamlRateLimit",
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
 *   `error checking config` (a float or over-int64 leaf). The message is the reference's text;
 *   the error also carries the line, the field path (`descriptors[0].rate_limit.unit`) and a
 *   hint (the nearest allowed key, the expected type), joined in `ConfigError.detail`.
 */
export function parseConfigFile(name: string, text: string): YamlRoot {
  try {
    return parseTwoPasses(text);
  } catch (error) {
    if (error instanceof FileProblem) {
      const { detail, ...where } = error.where;
      throw new ConfigError(`${name}: ${error.message}`, {
        ...where,
        file: name,
        detail: detail === undefined ? undefined : `${name}: ${detail}`,
      });
    }
    if (error instanceof YamlDocumentError) {
      const line = /^line (\d+): /.exec(error.message)?.[1];
      throw new ConfigError(
        `${name}: error loading config file: yaml: ${error.message}`,
        { file: name, line: line === undefined ? undefined : Number(line) },
      );
    }
    throw error;
  }
}

/** Where a {@link FileProblem} is, without the file. */
type ProblemLocation = Omit<ConfigErrorOptions, "file" | "cause">;

/** A problem with the file, without the `<name>: ` prefix, and where it is. */
class FileProblem extends Error {
  override readonly name = "FileProblem";
  readonly where: ProblemLocation;

  constructor(message: string, where: ProblemLocation = {}) {
    super(message);
    this.where = where;
  }
}

/** One type error of the second pass: yaml.v2's text and where it is. */
interface TypeProblem {
  readonly text: string;
  readonly line: number;
  readonly fieldPath: string;
  /** What the field takes, for the hint: `an integer from 0 to 4294967295`. */
  readonly expected: string;
}

/** `did you mean '<nearest>'?` when a value is close to an allowed one. */
function nearestHint(
  text: string,
  allowed: readonly string[],
): string | undefined {
  const nearest = nearestName(text, allowed);
  return nearest === undefined ? undefined : `did you mean '${nearest}'?`;
}

/** Joins a field path and a key: `descriptors[0]` + `rate_limit`. */
function fieldPathOf(parent: string, key: string): string {
  return parent === "" ? key : `${parent}.${key}`;
}

/**
 * The unmarshal-errors problem: the reference's text, and a detail that names each line's
 * field and what it takes.
 */
function unmarshalProblem(errors: readonly TypeProblem[]): FileProblem {
  const first = errors[0];
  return new FileProblem(
    `error loading config file: ${unmarshalErrors(errors.map((e) => e.text))}`,
    {
      line: first?.line,
      fieldPath: first?.fieldPath,
      hint: first === undefined ? undefined : `expected ${first.expected}`,
      detail: `error loading config file: ${unmarshalErrors(
        errors.map(
          (e) => `${e.text} (field ${e.fieldPath}: expected ${e.expected})`,
        ),
      )}`,
    },
  );
}

function parseTwoPasses(text: string): YamlRoot {
  const root = composeFirstDocument(text);
  if (root !== undefined && root.kind !== "map") {
    // The first pass decodes into a generic map; anything else is an unmarshal error.
    throw unmarshalProblem([
      {
        text: typeError(root, goTypes.genericMap),
        line: root.line,
        fieldPath: "(document)",
        expected: "a map with domain and descriptors",
      },
    ]);
  }
  if (root !== undefined) {
    const problem = checkKeys(root, "", new Set(), { visited: 0 });
    if (problem !== undefined) throw problem;
  }
  const decoder = new TypedDecoder();
  const decoded = decoder.root(root);
  if (decoder.errors.length > 0) throw unmarshalProblem(decoder.errors);
  return decoded;
}

// ---------------------------------------------------------------------------------------------
// First pass: key validation (upstream `config_impl.go` `validateYamlKeys`)

/**
 * Returns the first key problem in document order, or undefined. (Upstream walks a Go map, so
 * with several problems its choice is random; ours is the first in the file.)
 *
 * @param path - field path of `map` (`""` at the root)
 */
function checkKeys(
  map: GoMap,
  path: string,
  checked: Set<GoMap>,
  budget: { visited: number },
): FileProblem | undefined {
  // An aliased map is checked once.
  if (checked.has(map)) return undefined;
  checked.add(map);
  for (const { key, value } of map.entries) {
    if (++budget.visited > maxVisitedNodes) {
      return new FileProblem(
        "error loading config file: yaml: document contains excessive aliasing",
      );
    }
    if (key.kind !== "scalar" || !isGoString(key.resolved)) {
      return new FileProblem(
        `config error, key is not of type string: ${formatGoValue(key)}`,
        {
          line: key.line,
          fieldPath: path === "" ? undefined : path,
          hint: "keys must be strings: quote the key or fix the indentation",
        },
      );
    }
    const keyText = formatGoScalar(key.resolved);
    const keyPath = fieldPathOf(path, keyText);
    if (!allowedYamlKeys.has(keyText)) {
      const suggestion = nearestName(keyText, allowedYamlKeys);
      return new FileProblem(`config error, unknown key '${keyText}'`, {
        line: key.line,
        fieldPath: keyPath,
        hint:
          suggestion === undefined
            ? `valid keys: ${[...allowedYamlKeys].join(", ")}`
            : `did you mean '${suggestion}'?`,
      });
    }
    // Metadata is free-form: nothing under it is checked.
    if (keyText === "metadata") continue;
    let problem: FileProblem | undefined;
    if (value.kind === "seq") {
      for (const [index, element] of value.items.entries()) {
        const elementPath = `${keyPath}[${index}]`;
        if (element.kind !== "map") {
          return new FileProblem(
            `config error, yaml file contains list of type other than map: ${formatGoValue(element)}`,
            {
              line: element.line,
              fieldPath: elementPath,
              hint: "list elements must be maps (key: value)",
            },
          );
        }
        problem = checkKeys(element, elementPath, checked, budget);
        if (problem !== undefined) return problem;
      }
    } else if (value.kind === "map") {
      problem = checkKeys(value, keyPath, checked, budget);
      if (problem !== undefined) return problem;
    } else if (
      (keyText === "unit_multiplier" ||
        keyText === "burst" ||
        keyText === "lease_max") &&
      value.resolved.kind === "float"
    ) {
      // Extension fields: a clear message instead of the reference's generic one.
      return new FileProblem(
        `config error, line ${value.line}: invalid ${keyText} '${value.text}' (expected an integer >= 1)`,
        { line: value.line, fieldPath: keyPath },
      );
    } else if (!isAllowedLeaf(value.resolved)) {
      return new FileProblem("error checking config", {
        line: value.line,
        fieldPath: keyPath,
        hint: leafHint(keyText, value.text, value.resolved),
      });
    }
  }
  return undefined;
}

/** Why a leaf was refused by the first pass (the reference says only `error checking config`). */
function leafHint(
  keyText: string,
  text: string,
  resolved: ResolvedScalar,
): string {
  if (keyText === "requests_per_unit") {
    return `'${text}' is not a whole number: requests_per_unit takes an integer from 0 to 4294967295`;
  }
  if (resolved.kind === "float") {
    return `'${text}' is a float: values must be strings, integers, booleans or null; quote it to use it as a string`;
  }
  return `'${text}' is larger than the largest 64-bit integer; quote it to use it as a string`;
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
  readonly errors: TypeProblem[] = [];
  private visited = 0;

  root(node: GoMap | undefined): YamlRoot {
    let domain = "";
    let descriptors: readonly YamlDescriptor[] = [];
    let charge: ChargeMode | undefined;
    let failureMode: string | undefined;
    const lines = new Map<string, number>();
    for (const { key, value } of this.fields(node)) {
      lines.set(key, value.line);
      if (key === "domain") domain = this.string(value, key);
      else if (key === "descriptors")
        descriptors = this.descriptors(value, key);
      else if (key === "charge") charge = this.charge(value);
      else if (key === "failure_mode" && !isNull(value))
        failureMode = this.string(value, key);
    }
    const root: YamlRoot = {
      domain,
      descriptors,
      ...(charge !== undefined ? { charge } : {}),
      ...(failureMode !== undefined ? { failureMode } : {}),
    };
    recordSourceLines(root, lines);
    return root;
  }

  /** `charge:` must be one of {@link chargeModes}; null means the default. */
  private charge(node: GoNode): ChargeMode | undefined {
    if (isNull(node)) return undefined;
    const text = this.string(node, "charge");
    const mode = chargeModes.find((m) => m === text);
    if (mode === undefined) {
      throw new FileProblem(
        `config error, line ${node.line}: invalid charge '${text}' (expected one of: ${chargeModes.join(", ")})`,
        {
          line: node.line,
          fieldPath: "charge",
          hint: nearestHint(text, chargeModes),
        },
      );
    }
    return mode;
  }

  private descriptors(node: GoNode, path: string): readonly YamlDescriptor[] {
    return this.list(
      node,
      path,
      goTypes.descriptors,
      "a list of descriptors",
      (item, itemPath) => this.descriptor(item, itemPath),
    );
  }

  private descriptor(node: GoMap, path: string): YamlDescriptor {
    let key = "";
    let value = "";
    let rateLimit: YamlRateLimit | undefined;
    let rateLimits: readonly YamlRateLimit[] | undefined;
    let descriptors: readonly YamlDescriptor[] = [];
    let shadowMode = false;
    let quotaMode = false;
    let detailedMetric = false;
    let valueToMetric = false;
    let shareThreshold = false;
    let metadata: JsonObject | undefined;
    const lines = new Map<string, number>([["", node.line]]);
    for (const field of this.fields(node)) {
      const v = field.value;
      const fieldPath = fieldPathOf(path, field.key);
      lines.set(field.key, v.line);
      switch (field.key) {
        case "key":
          key = this.string(v, fieldPath);
          break;
        case "value":
          value = this.string(v, fieldPath);
          break;
        case "rate_limit":
          rateLimit = this.rateLimit(v, fieldPath);
          break;
        case "rate_limits":
          rateLimits = isNull(v)
            ? undefined
            : this.list(
                v,
                fieldPath,
                goTypes.rateLimitList,
                "a list of rate limits (unit, requests_per_unit, …)",
                (item, itemPath) => this.rateLimit(item, itemPath),
              ).filter((entry) => entry !== undefined);
          break;
        case "descriptors":
          descriptors = this.descriptors(v, fieldPath);
          break;
        case "shadow_mode":
          shadowMode = this.bool(v, fieldPath);
          break;
        case "quota_mode":
          quotaMode = this.bool(v, fieldPath);
          break;
        case "detailed_metric":
          detailedMetric = this.bool(v, fieldPath);
          break;
        case "value_to_metric":
          valueToMetric = this.bool(v, fieldPath);
          break;
        case "share_threshold":
          shareThreshold = this.bool(v, fieldPath);
          break;
        case "metadata":
          metadata = this.metadata(v, fieldPath);
          break;
        default:
          // Known keys in the wrong place (e.g. `domain` in a descriptor) are ignored.
          break;
      }
    }
    const descriptor: YamlDescriptor = {
      key,
      value,
      rateLimit,
      ...(rateLimits !== undefined ? { rateLimits } : {}),
      descriptors,
      shadowMode,
      quotaMode,
      detailedMetric,
      valueToMetric,
      shareThreshold,
      metadata,
      line: node.line,
    };
    recordSourceLines(descriptor, lines);
    return descriptor;
  }

  private rateLimit(node: GoNode, path: string): YamlRateLimit | undefined {
    if (isNull(node)) return undefined;
    if (node.kind !== "map") {
      this.typeProblem(
        node,
        path,
        goTypes.rateLimit,
        "a map (unit, requests_per_unit, …)",
      );
      return undefined;
    }
    let requestsPerUnit = 0;
    let unit = "";
    let unlimited = false;
    let name = "";
    let replaces: readonly YamlReplaces[] = [];
    let algorithm: YamlAlgorithm | undefined;
    let unitMultiplier: number | undefined;
    let burst: number | undefined;
    let timeZone: string | undefined;
    let weekStart: string | undefined;
    let lease: boolean | undefined;
    let leaseMax: number | undefined;
    const lines = new Map<string, number>([["", node.line]]);
    for (const { key, value } of this.fields(node)) {
      const fieldPath = fieldPathOf(path, key);
      lines.set(key, value.line);
      if (key === "requests_per_unit")
        requestsPerUnit = this.uint32(value, fieldPath);
      else if (key === "unit") unit = this.string(value, fieldPath);
      else if (key === "unlimited") unlimited = this.bool(value, fieldPath);
      else if (key === "name") name = this.string(value, fieldPath);
      else if (key === "replaces") {
        replaces = this.list(
          value,
          fieldPath,
          goTypes.replacesList,
          "a list of {name: …}",
          (item, itemPath) => this.replaces(item, itemPath),
        );
      } else if (key === "algorithm")
        algorithm = this.algorithm(value, fieldPath);
      else if (key === "unit_multiplier")
        unitMultiplier = this.positiveInteger(value, fieldPath, key);
      else if (key === "burst")
        burst = this.positiveInteger(value, fieldPath, key);
      else if (key === "time_zone")
        timeZone = isNull(value) ? undefined : this.string(value, fieldPath);
      else if (key === "week_start")
        weekStart = isNull(value) ? undefined : this.string(value, fieldPath);
      else if (key === "lease") lease = this.bool(value, fieldPath);
      else if (key === "lease_max")
        leaseMax = this.positiveInteger(value, fieldPath, key);
    }
    const rateLimit: YamlRateLimit = {
      requestsPerUnit,
      unit,
      unlimited,
      name,
      replaces,
      ...(algorithm !== undefined ? { algorithm } : {}),
      ...(unitMultiplier !== undefined ? { unitMultiplier } : {}),
      ...(burst !== undefined ? { burst } : {}),
      ...(timeZone !== undefined ? { timeZone } : {}),
      ...(weekStart !== undefined ? { weekStart } : {}),
      ...(lease !== undefined ? { lease } : {}),
      ...(leaseMax !== undefined ? { leaseMax } : {}),
    };
    recordSourceLines(rateLimit, lines);
    return rateLimit;
  }

  /** `algorithm:` must be one of {@link yamlAlgorithms}; null means the default. */
  private algorithm(node: GoNode, path: string): YamlAlgorithm | undefined {
    if (isNull(node)) return undefined;
    const text = this.string(node, path);
    const algorithm = yamlAlgorithms.find((a) => a === text);
    if (algorithm === undefined) {
      throw new FileProblem(
        `config error, line ${node.line}: invalid rate limit algorithm '${text}' (expected one of: ${yamlAlgorithms.join(", ")})`,
        {
          line: node.line,
          fieldPath: path,
          hint: nearestHint(text, yamlAlgorithms),
        },
      );
    }
    return algorithm;
  }

  /**
   * `unit_multiplier:`, `burst:` and `lease_max:` must be an integer in 1 … 4294967295; null
   * means the default.
   */
  private positiveInteger(
    node: GoNode,
    path: string,
    field: "unit_multiplier" | "burst" | "lease_max",
  ): number | undefined {
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
      `config error, line ${node.line}: invalid ${field} '${shown}' (expected an integer >= 1)`,
      { line: node.line, fieldPath: path },
    );
  }

  private replaces(node: GoMap, path: string): YamlReplaces {
    let name = "";
    const lines = new Map<string, number>([["", node.line]]);
    for (const { key, value } of this.fields(node)) {
      lines.set(key, value.line);
      if (key === "name") name = this.string(value, fieldPathOf(path, key));
    }
    const replaces: YamlReplaces = { name };
    recordSourceLines(replaces, lines);
    return replaces;
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
    path: string,
    goType: string,
    expected: string,
    decode: (item: GoMap, itemPath: string) => T,
  ): readonly T[] {
    if (isNull(node)) return [];
    if (node.kind !== "seq") {
      this.typeProblem(node, path, goType, expected);
      return [];
    }
    const out: T[] = [];
    for (const [index, item] of node.items.entries()) {
      // The first pass guarantees list elements are maps.
      if (item.kind === "map") out.push(decode(item, `${path}[${index}]`));
    }
    return out;
  }

  /** A string field takes the scalar's text as written (`yes`, `0x1F`, `123`); null is "". */
  private string(node: GoNode, path: string): string {
    if (node.kind !== "scalar") {
      this.typeProblem(node, path, goTypes.string, "a string");
      return "";
    }
    const resolved = node.resolved;
    if (resolved.kind === "null") return "";
    return resolved.kind === "binary" ? resolved.value : node.text;
  }

  private bool(node: GoNode, path: string): boolean {
    if (node.kind === "scalar") {
      if (node.resolved.kind === "null") return false;
      if (node.resolved.kind === "bool") return node.resolved.value;
    }
    this.typeProblem(node, path, goTypes.bool, "true or false (unquoted)");
    return false;
  }

  /**
   * A uint32 field takes only an integer scalar in 0 … 4294967295. (yaml.v2 would also truncate
   * a float, but the first pass has already refused every float.)
   */
  private uint32(node: GoNode, path: string): number {
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
    this.typeProblem(
      node,
      path,
      goTypes.uint32,
      "an unquoted integer from 0 to 4294967295",
    );
    return 0;
  }

  /**
   * Metadata decodes into `map[string]interface{}` and then becomes a protobuf `Struct`: top-level
   * keys are the key text, nested non-string keys are formatted as Go prints them, numbers are
   * doubles (docs/reference-parity.md#metadata).
   */
  private metadata(node: GoNode, path: string): JsonObject | undefined {
    if (isNull(node)) return undefined;
    if (node.kind !== "map") {
      this.typeProblem(node, path, goTypes.metadata, "a map");
      return undefined;
    }
    const out: JsonObject = {};
    for (const { key, value } of node.entries) {
      this.count();
      const keyText = this.string(key, path);
      out[keyText] = this.json(value);
    }
    return out;
  }

  /** Collects one type error (yaml.v2 goes on decoding after one). */
  private typeProblem(
    node: GoNode,
    fieldPath: string,
    goType: string,
    expected: string,
  ): void {
    this.errors.push({
      text: typeError(node, goType),
      line: node.line,
      fieldPath,
      expected,
    });
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
