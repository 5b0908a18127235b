import { describe, expect, it } from "vitest";
import { YamlDocumentError } from "../../../src/config/yaml-scalar.js";
import {
  composeFirstDocument,
  formatGoValue,
  isNull,
  typeError,
  unmarshalErrors,
  type GoNode,
} from "../../../src/config/yaml-v2-document.js";

function compose(text: string): GoNode {
  const node = composeFirstDocument(text);
  if (node === undefined) throw new Error("empty document");
  return node;
}

describe("composeFirstDocument", () => {
  it("reads only the first document; an empty or null one is undefined", () => {
    expect(formatGoValue(compose("a: 1\n---\nb: [\n"))).toBe("map[a:1]");
    expect(composeFirstDocument("")).toBeUndefined();
    expect(composeFirstDocument("~\n")).toBeUndefined();
  });

  it("resolves YAML 1.1 scalars and keeps their text", () => {
    const node = compose("[yes, 0x1F, '0x1F', ~]");
    expect(node.kind).toBe("seq");
    if (node.kind !== "seq") return;
    expect(node.items.map((item) => formatGoValue(item))).toEqual([
      "true",
      "31",
      "0x1F",
      "<nil>",
    ]);
    expect(isNull(node.items[3]!)).toBe(true);
    const first = node.items[0]!;
    expect(first.kind === "scalar" ? first.text : "").toBe("yes");
  });

  it("merges << maps with earlier maps taking precedence, and a repeated key keeps its last value", () => {
    const node = compose(
      "a: &a {p: 1, q: 1}\nb: &b {q: 2, r: 2}\nc:\n  <<: [*a, *b]\n  s: 0\n  s: 3\n",
    );
    expect(formatGoValue(node)).toBe(
      "map[a:map[p:1 q:1] b:map[q:2 r:2] c:map[p:1 q:1 r:2 s:3]]",
    );
  });

  it("reports syntax errors, unknown anchors and bad merges as yaml.v2 document errors", () => {
    expect(() => composeFirstDocument("a: [\n")).toThrow(YamlDocumentError);
    expect(() => composeFirstDocument("a: *nowhere\n")).toThrow(
      YamlDocumentError,
    );
    expect(() => composeFirstDocument("a:\n  <<: 1\n")).toThrow(
      "map merge requires map or sequence of maps as the value",
    );
  });
});

describe("typeError and unmarshalErrors", () => {
  it("name the node's line and tag, shortening long scalar values", () => {
    const node = compose("a: [1]\nb: abcdefghijk\nc: -1\n");
    if (node.kind !== "map") throw new Error("not a map");
    const [a, b, c] = node.entries.map((entry) => entry.value);
    expect(typeError(a!, "string")).toBe(
      "line 1: cannot unmarshal !!seq into string",
    );
    expect(typeError(b!, "uint32")).toBe(
      "line 2: cannot unmarshal !!str `abcdefg...` into uint32",
    );
    expect(unmarshalErrors([typeError(c!, "uint32")])).toBe(
      "yaml: unmarshal errors:\n  line 3: cannot unmarshal !!int `-1` into uint32",
    );
  });
});
