import { existsSync, readFileSync } from "node:fs";
import { join, posix } from "node:path";
import { describe, expect, it } from "vitest";

// docs/architecture.md is a map of the code (house style §17): it stays true only if a rename
// breaks a test. This one fails naming every repository path the document names that does not
// exist, and every function of the hot-path table that its file does not contain.

const root = join(import.meta.dirname, "..", "..", "..");
const docPath = join(root, "docs", "architecture.md");

/** A path the document names: where, as written, and the repository paths it may mean. */
interface PathReference {
  readonly line: number;
  readonly text: string;
  /** Repository-relative candidates; the reference holds when one exists. */
  readonly candidates: readonly string[];
}

/** One table row: its 1-based line, its section heading and its cells (trimmed). */
interface TableRow {
  readonly line: number;
  readonly section: string;
  readonly cells: readonly string[];
}

/** Paths written from the repository root. */
const rootPath = /^(?:src|test|bench|docs)\//;
/** A file name, possibly under folders: `decide.ts`, `backends/kv/kv-scripts.ts`. */
const fileName =
  /^[\w-]+(?:\/[\w.-]+)*\.(?:ts|md|js|mjs|json|ya?ml|proto|css|sh)$/;
/** A folder: `limiter/`, `server/grpc/`. */
const folderName = /^[\w-]+(?:\/[\w-]+)*\/$/;

/** The backticked spans of `text`, in order. */
function codeSpans(text: string): string[] {
  return [...text.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);
}

/** Expands `a/{b,c}/d` into `a/b/d` and `a/c/d` (one brace group at a time, nested freely). */
function expandBraces(text: string): string[] {
  const match = /\{([^{}]*)\}/.exec(text);
  if (match === null) return [text];
  const head = text.slice(0, match.index);
  const tail = text.slice(match.index + match[0].length);
  return match[1]!
    .split(",")
    .flatMap((choice) => expandBraces(head + choice + tail));
}

/** The rows of every Markdown table (separator rows left out), with their section. */
function tableRows(markdown: string): TableRow[] {
  const rows: TableRow[] = [];
  let section = "";
  markdown.split("\n").forEach((text, i) => {
    const heading = /^#{1,6} (.+)$/.exec(text);
    if (heading !== null) section = heading[1]!.trim();
    if (!text.startsWith("|")) return;
    // Cells split on `|` outside code spans (a span may hold `a | b`).
    const cells: string[] = [];
    let cell = "";
    let inCode = false;
    for (const ch of text.slice(
      1,
      text.trimEnd().endsWith("|") ? -1 : undefined,
    )) {
      if (ch === "`") inCode = !inCode;
      if (ch === "|" && !inCode) {
        cells.push(cell.trim());
        cell = "";
      } else cell += ch;
    }
    cells.push(cell.trim());
    if (cells.every((c) => /^:?-+:?$/.test(c))) return;
    rows.push({ line: i + 1, section, cells });
  });
  return rows;
}

/**
 * Every repository path `markdown` names: each backticked `src/…`, `test/…`, `bench/…` or
 * `docs/…` span (braces expanded, an `#anchor` dropped), anywhere; and in a table row, each
 * backticked file or folder name written relative to `src/` or to a folder the same row names
 * (a root path's folder, or a folder name found under `src/`).
 *
 * @param exists - whether a repository-relative path exists
 */
function pathReferences(
  markdown: string,
  exists: (path: string) => boolean,
): PathReference[] {
  const out: PathReference[] = [];
  markdown.split("\n").forEach((text, i) => {
    for (const span of codeSpans(text)) {
      const path = span.replace(/#.*$/, "");
      if (!rootPath.test(path)) continue;
      for (const one of expandBraces(path))
        out.push({ line: i + 1, text: one, candidates: [one] });
    }
  });
  for (const row of tableRows(markdown)) {
    const spans = row.cells.flatMap(codeSpans);
    const folders = new Set<string>(["src/"]);
    for (const span of spans) {
      for (const path of expandBraces(span.replace(/#.*$/, ""))) {
        if (rootPath.test(path))
          folders.add(path.endsWith("/") ? path : posix.dirname(path) + "/");
        else if (folderName.test(path) && exists(`src/${path}`))
          folders.add(`src/${path}`);
      }
    }
    for (const span of spans) {
      for (const path of expandBraces(span)) {
        if (rootPath.test(path)) continue;
        if (!fileName.test(path) && !folderName.test(path)) continue;
        out.push({
          line: row.line,
          text: path,
          candidates: [...folders].map((folder) => folder + path),
        });
      }
    }
  }
  return out;
}

/** One row of the hot-path table: the file it names and the names of its function cell. */
interface HotPathRow {
  readonly line: number;
  readonly file: string;
  readonly names: readonly string[];
}

/**
 * The rows of the table under the "hot path" heading whose header has `file` and `function`
 * columns. A name `Class.method` stands for both identifiers; `()` is dropped.
 */
function hotPathRows(markdown: string): HotPathRow[] {
  const rows = tableRows(markdown).filter((r) =>
    r.section.toLowerCase().startsWith("the hot path"),
  );
  const header = rows[0];
  if (header === undefined) return [];
  const fileColumn = header.cells.indexOf("file");
  const functionColumn = header.cells.indexOf("function");
  if (fileColumn < 0 || functionColumn < 0) return [];
  return rows.slice(1).map((row) => ({
    line: row.line,
    file: codeSpans(row.cells[fileColumn] ?? "").join(" "),
    names: codeSpans(row.cells[functionColumn] ?? "").flatMap((name) =>
      name.replace(/\(\)$/, "").split("."),
    ),
  }));
}

const repoExists = (path: string): boolean => existsSync(join(root, path));

describe("docs/architecture.md", () => {
  const markdown = readFileSync(docPath, "utf8");

  it("names only paths that exist", () => {
    const references = pathReferences(markdown, repoExists);
    expect(references.length).toBeGreaterThan(100);
    const missing = references
      .filter((r) => !r.candidates.some(repoExists))
      .map((r) => `docs/architecture.md:${r.line}: ${r.text}`);
    expect([...new Set(missing)]).toEqual([]);
  });

  it("names in each hot-path row a function its file contains", () => {
    const rows = hotPathRows(markdown);
    expect(rows.length).toBeGreaterThan(20);
    const wrong = rows.flatMap((row) => {
      if (!rootPath.test(row.file) || !repoExists(row.file))
        return [`docs/architecture.md:${row.line}: no file: ${row.file}`];
      if (row.names.length === 0)
        return [`docs/architecture.md:${row.line}: no function named`];
      const source = readFileSync(join(root, row.file), "utf8");
      return row.names
        .filter(
          (name) =>
            !/^[A-Za-z_$][\w$]*$/.test(name) ||
            !new RegExp(
              `(?<![\\w$])${name.replace(/\$/g, "\\$")}(?![\\w$])`,
            ).test(source),
        )
        .map(
          (name) =>
            `docs/architecture.md:${row.line}: ${name} not in ${row.file}`,
        );
    });
    expect(wrong).toEqual([]);
  });

  it("reads tables, braces and paths relative to a row's folder", () => {
    const sample = [
      "See `src/a/{b,c}.ts` and `docs/x.md#anchor`.",
      "",
      "## The hot path",
      "",
      "| step | file | function |",
      "| ---- | ---- | -------- |",
      "| one | `src/a/b.ts` | `Thing.run`, `go()` |",
      "",
      "## Folders",
      "",
      "| folder | owns |",
      "| --- | --- |",
      "| `a/` | `c.ts`, `d.ts`, `a | b` |",
    ].join("\n");
    const present = new Set(["src/a/", "src/a/b.ts", "src/a/c.ts"]);
    const references = pathReferences(sample, (p) => present.has(p));
    expect(
      references.map((r) => [
        r.line,
        r.text,
        r.candidates.some((c) => present.has(c)),
      ]),
    ).toEqual([
      [1, "src/a/b.ts", true],
      [1, "src/a/c.ts", true],
      [1, "docs/x.md", false],
      [7, "src/a/b.ts", true],
      [13, "a/", true],
      [13, "c.ts", true],
      [13, "d.ts", false],
    ]);
    expect(hotPathRows(sample)).toEqual([
      { line: 7, file: "src/a/b.ts", names: ["Thing", "run", "go"] },
    ]);
  });
});
