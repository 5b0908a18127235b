import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";

// Parity comments cite docs/reference-parity.md by anchor (house style §15). This keeps them
// honest: no comment may cite `behavior.md` (a file outside this repository), and every cited
// anchor must exist in the document.

const root = join(import.meta.dirname, "..", "..", "..");
const docPath = join(root, "docs", "reference-parity.md");

/** Every `.ts` file below `dir`, as paths relative to the repository root. */
function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith(".ts"))
    .map((entry) => relative(root, join(entry.parentPath, entry.name)))
    .sort();
}

/**
 * Anchors of the document: explicit `<a id="…"></a>`, plus the GitHub slug of every heading
 * (lower case, punctuation dropped, spaces to `-`).
 */
function documentAnchors(markdown: string): Set<string> {
  const anchors = new Set<string>();
  for (const match of markdown.matchAll(/<a id="([^"]+)"><\/a>/g))
    anchors.add(match[1]!);
  for (const match of markdown.matchAll(/^#{1,6} (.+)$/gm)) {
    anchors.add(
      match[1]!
        .trim()
        .toLowerCase()
        .replace(/[^\p{L}\p{N} _-]/gu, "")
        .replace(/ /g, "-"),
    );
  }
  return anchors;
}

// `docs/reference-parity.md#a`, optionally followed by `, #b` / ` and #c` for several anchors.
const citation =
  /docs\/reference-parity\.md#([a-z0-9-]+)((?:(?:,| and)\s+(?:\*\s+|\/\/\s+)?#[a-z0-9-]+)*)/g;

/** Every anchor cited in `text`, with its 1-based line. */
function citedAnchors(text: string): { anchor: string; line: number }[] {
  const out: { anchor: string; line: number }[] = [];
  for (const match of text.matchAll(citation)) {
    const line = text.slice(0, match.index).split("\n").length;
    out.push({ anchor: match[1]!, line });
    for (const more of match[2]!.matchAll(/#([a-z0-9-]+)/g))
      out.push({ anchor: more[1]!, line });
  }
  return out;
}

describe("docs/reference-parity.md citations", () => {
  const files = sourceFiles(join(root, "src"));

  it("finds the source files", () => {
    expect(files.length).toBeGreaterThan(50);
  });

  it("no file in src/ cites behavior.md (cite docs/reference-parity.md#<anchor>)", () => {
    const offenders = files.flatMap((file) =>
      readFileSync(join(root, file), "utf8")
        .split("\n")
        .flatMap((text, i) =>
          text.includes("behavior.md") ? [`${file}:${i + 1}`] : [],
        ),
    );
    expect(offenders).toEqual([]);
  });

  it("every docs/reference-parity.md anchor cited in src/ exists", () => {
    const anchors = documentAnchors(readFileSync(docPath, "utf8"));
    const missing = files.flatMap((file) =>
      citedAnchors(readFileSync(join(root, file), "utf8"))
        .filter(({ anchor }) => !anchors.has(anchor))
        .map(({ anchor, line }) => `${file}:${line}: #${anchor}`),
    );
    expect(missing).toEqual([]);
  });

  it("recognizes explicit anchors, heading slugs and multi-anchor citations", () => {
    expect(
      documentAnchors('<a id="cache-key"></a>\n\n## Where we differ\n'),
    ).toEqual(new Set(["cache-key", "where-we-differ"]));
    expect(
      citedAnchors(
        "// see docs/reference-parity.md#stats-key and #share-threshold.\n" +
          " * (docs/reference-parity.md#windows)",
      ),
    ).toEqual([
      { anchor: "stats-key", line: 1 },
      { anchor: "share-threshold", line: 1 },
      { anchor: "windows", line: 2 },
    ]);
  });
});
