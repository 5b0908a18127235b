// The config file as gopkg.in/yaml.v2 sees it, for parse-config-file.ts: the first document
// composed with YAML 1.1 scalars, aliases and `<<` merges resolved as yaml.v2 resolves them, and
// yaml.v2's texts for type errors and Go's `%v` of decoded values. Knows nothing of the
// rate-limit schema.

import {
  Composer,
  LineCounter,
  Parser,
  isAlias,
  isMap,
  isScalar,
  isSeq,
  Scalar,
} from "yaml";
import type { Document, Node as YamlNode } from "yaml";
import type { ResolvedScalar } from "./yaml-scalar.js";
import {
  YamlDocumentError,
  formatGoScalar,
  resolveYamlScalar,
  shortYamlTag,
} from "./yaml-scalar.js";

/**
 * Upper bound on nodes visited per pass. Reached only by alias bombs (an anchor referenced many
 * times inside another anchor referenced many times…); yaml.v2 refuses those documents too.
 */
export const maxVisitedNodes = 1_000_000;

/** A scalar after YAML 1.1 resolution; `text` is what yaml.v2 calls the node's value. */
export interface GoScalar {
  readonly kind: "scalar";
  /** 1-based line of the node. */
  readonly line: number;
  readonly text: string;
  /** Tag to name the node by in messages: `!!int`, `!!str`, or an explicit custom tag. */
  readonly tag: string;
  readonly resolved: ResolvedScalar;
  /** Whether this is an untagged plain `<<` (a YAML merge key). */
  readonly mergeKey: boolean;
}

/** A mapping node. */
export interface GoMap {
  readonly kind: "map";
  readonly line: number;
  /** Entries in document order; a repeated key keeps its first position and its last value. */
  readonly entries: readonly GoEntry[];
}

/** One key and value of a {@link GoMap}. */
export interface GoEntry {
  readonly key: GoNode;
  readonly value: GoNode;
}

/** A sequence node. */
export interface GoSeq {
  readonly kind: "seq";
  readonly line: number;
  readonly items: readonly GoNode[];
}

/** The document as yaml.v2 sees it: aliases and merge keys resolved, scalars typed. */
export type GoNode = GoScalar | GoMap | GoSeq;

/**
 * Formats yaml.v2's `TypeError` text: `yaml: unmarshal errors:` then one indented line per
 * error (as {@link typeError} writes them).
 */
export function unmarshalErrors(errors: readonly string[]): string {
  return `yaml: unmarshal errors:\n  ${errors.join("\n  ")}`;
}

/**
 * yaml.v2 `decoder.terror`: `line <n>: cannot unmarshal <tag> into <goType>`, a scalar's value
 * (in backquotes, cut to 7 characters and `...` when over 10) after its tag.
 */
export function typeError(node: GoNode, goType: string): string {
  let shown = "";
  let tag: string;
  if (node.kind === "scalar") {
    tag = node.tag;
    shown =
      node.text.length > 10
        ? ` \`${node.text.slice(0, 7)}...\``
        : ` \`${node.text}\``;
  } else {
    tag = node.kind === "map" ? "!!map" : "!!seq";
  }
  return `line ${node.line}: cannot unmarshal ${tag}${shown} into ${goType}`;
}

/**
 * Parses the first document with the `yaml` package's failsafe schema (so every scalar keeps
 * its text) and converts it. Returns undefined for an empty or null document.
 *
 * @throws {@link YamlDocumentError} for syntax errors and document-level failures
 */
export function composeFirstDocument(text: string): GoNode | undefined {
  const lineCounter = new LineCounter();
  const parser = new Parser(lineCounter.addNewLine);
  const composer = new Composer({
    version: "1.1",
    schema: "failsafe",
    uniqueKeys: false,
    strict: false,
  });
  let doc: Document.Parsed | undefined;
  // Like yaml.v2 `Unmarshal`, stop after the first document: later ones are never parsed.
  for (const composed of composer.compose(parser.parse(text), true)) {
    doc = composed;
    break;
  }
  if (doc === undefined) return undefined;
  const syntaxError = doc.errors[0];
  if (syntaxError !== undefined) {
    const line = lineCounter.linePos(syntaxError.pos[0]).line;
    throw new YamlDocumentError(`line ${line}: ${syntaxError.message}`);
  }
  const contents = doc.contents;
  if (contents === null) return undefined;
  const node = new Composition(doc, lineCounter).convert(contents, 0);
  if (node.kind === "scalar" && node.resolved.kind === "null") return undefined;
  return node;
}

/** Converts `yaml` AST nodes, resolving aliases and `<<` merges as yaml.v2 does. */
class Composition {
  private readonly converted = new Map<YamlNode, GoNode>();
  private readonly inProgress = new Set<YamlNode>();
  private visited = 0;
  private readonly doc: Document.Parsed;
  private readonly lineCounter: LineCounter;

  constructor(doc: Document.Parsed, lineCounter: LineCounter) {
    this.doc = doc;
    this.lineCounter = lineCounter;
  }

  convert(node: unknown, fallbackOffset: number): GoNode {
    if (++this.visited > maxVisitedNodes) {
      throw new YamlDocumentError("document contains excessive aliasing");
    }
    if (isAlias(node)) {
      const target = node.resolve(this.doc);
      if (target === undefined) {
        throw new YamlDocumentError(
          `unknown anchor '${node.source}' referenced`,
        );
      }
      if (this.inProgress.has(target)) {
        throw new YamlDocumentError(
          `anchor '${node.source}' value contains itself`,
        );
      }
      return this.convert(target, fallbackOffset);
    }
    if (!isScalar(node) && !isMap(node) && !isSeq(node)) {
      // A missing node (`key:` with nothing after it) is a null scalar.
      return this.scalar("", "", true, this.line(fallbackOffset));
    }
    const cached = this.converted.get(node);
    if (cached !== undefined) return cached;
    this.inProgress.add(node);
    const offset = node.range?.[0] ?? fallbackOffset;
    const line = this.line(offset);
    let result: GoNode;
    if (isScalar(node)) {
      const plain = node.type === Scalar.PLAIN || node.type === undefined;
      result = this.scalar(
        String(node.value),
        shortYamlTag(node.tag ?? ""),
        plain,
        line,
      );
    } else if (isSeq(node)) {
      result = {
        kind: "seq",
        line,
        items: node.items.map((item) => this.convert(item, offset)),
      };
    } else {
      result = {
        kind: "map",
        line,
        entries: this.mapEntries(node.items, offset),
      };
    }
    this.inProgress.delete(node);
    this.converted.set(node, result);
    return result;
  }

  private mapEntries(
    items: readonly { key: unknown; value: unknown }[],
    offset: number,
  ): GoEntry[] {
    const entries: GoEntry[] = [];
    const indexByKey = new Map<string, number>();
    const set = (key: GoNode, value: GoNode): void => {
      // Go map semantics: a repeated key overwrites the earlier value.
      const identity =
        key.kind === "scalar"
          ? `${key.resolved.kind}:${formatGoScalar(key.resolved)}`
          : undefined;
      const existing =
        identity === undefined ? undefined : indexByKey.get(identity);
      if (existing !== undefined) {
        entries[existing] = { key, value };
        return;
      }
      if (identity !== undefined) indexByKey.set(identity, entries.length);
      entries.push({ key, value });
    };
    for (const item of items) {
      const key = this.convert(item.key, offset);
      const keyOffset =
        isScalar(item.key) || isMap(item.key) || isSeq(item.key)
          ? (item.key.range?.[0] ?? offset)
          : offset;
      const value = this.convert(item.value, keyOffset);
      if (key.kind === "scalar" && key.mergeKey) {
        for (const merged of mergeSources(value)) {
          for (const entry of merged.entries) set(entry.key, entry.value);
        }
        continue;
      }
      set(key, value);
    }
    return entries;
  }

  private scalar(
    text: string,
    tag: string,
    plain: boolean,
    line: number,
  ): GoScalar {
    const { resolved, tag: shownTag } = resolveYamlScalar(text, tag, plain);
    return {
      kind: "scalar",
      line,
      text,
      tag: shownTag,
      resolved,
      mergeKey: plain && tag === "" && text === "<<",
    };
  }

  private line(offset: number): number {
    return this.lineCounter.linePos(offset).line;
  }
}

/**
 * The maps a `<<` merge key brings in, in application order: yaml.v2 `decoder.merge` applies a
 * list of maps from last to first, so earlier maps take precedence.
 */
function mergeSources(value: GoNode): readonly GoMap[] {
  if (value.kind === "map") return [value];
  if (
    value.kind === "seq" &&
    value.items.every((item) => item.kind === "map")
  ) {
    return [...value.items].reverse();
  }
  throw new YamlDocumentError(
    "map merge requires map or sequence of maps as the value",
  );
}

/** Whether yaml.v2 decodes the scalar into a Go `string` inside `interface{}`. */
export function isGoString(resolved: ResolvedScalar): boolean {
  return (
    resolved.kind === "str" ||
    resolved.kind === "timestamp" ||
    resolved.kind === "binary"
  );
}

/** Formats a node like Go's `%v` of what yaml.v2 decodes into `interface{}`. */
export function formatGoValue(node: GoNode): string {
  switch (node.kind) {
    case "scalar":
      return formatGoScalar(node.resolved);
    case "seq":
      return `[${node.items.map(formatGoValue).join(" ")}]`;
    case "map": {
      // fmt prints maps with sorted keys.
      const pairs = node.entries.map(
        ({ key, value }) => [formatGoValue(key), formatGoValue(value)] as const,
      );
      pairs.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
      return `map[${pairs.map(([k, v]) => `${k}:${v}`).join(" ")}]`;
    }
  }
}

/** Whether the node is a null scalar (`~`, `null`, empty). */
export function isNull(node: GoNode): boolean {
  return node.kind === "scalar" && node.resolved.kind === "null";
}
