// The generated part of docs/migration.md: the Go reference's variable names and `BACKEND_TYPE`
// words with ours, from the table in ./legacy-names.ts.

import { legacyBackendTypes, legacyNames } from "./legacy-names.js";

/** First line of the generated block in docs/migration.md. */
export const legacyNamesBlockStart = "<!-- prettier-ignore-start -->";
/** Last line of the generated block in docs/migration.md. */
export const legacyNamesBlockEnd = "<!-- prettier-ignore-end -->";

const escapeCell = (text: string): string => text.replace(/\|/g, "\\|");

/**
 * Returns the generated block of docs/migration.md, newline-terminated: a Markdown table of
 * {@link legacyNames} (reference variable, ours, what differs) and one of
 * {@link legacyBackendTypes}, between {@link legacyNamesBlockStart} and
 * {@link legacyNamesBlockEnd} (Prettier leaves it as generated). `make docs` writes it into
 * the file; a test keeps the file fresh.
 */
export function legacyNamesMarkdown(): string {
  const out: string[] = [
    legacyNamesBlockStart,
    "<!-- Generated from src/settings/legacy-names.ts by `make docs`; do not edit. -->",
    "",
    "| Go reference | set instead | what differs |",
    "|---|---|---|",
  ];
  for (const { legacy, replacement, note } of legacyNames) {
    out.push(
      `| \`${legacy}\` | \`${replacement}\` | ${escapeCell(note ?? "same")} |`,
    );
  }
  out.push(
    "",
    "| Go reference | set instead |",
    "|---|---|",
    ...[...legacyBackendTypes].map(
      ([legacy, ours]) =>
        `| \`BACKEND_TYPE=${legacy}\` | \`BACKEND_TYPE=${ours}\` |`,
    ),
    legacyNamesBlockEnd,
  );
  return out.join("\n") + "\n";
}

/**
 * Returns `doc` with its generated block (from {@link legacyNamesBlockStart} to the next
 * {@link legacyNamesBlockEnd}, both lines included) replaced by {@link legacyNamesMarkdown}.
 *
 * @throws Error when `doc` has no such block
 */
export function withLegacyNamesBlock(doc: string): string {
  const start = doc.indexOf(`${legacyNamesBlockStart}\n`);
  const end = start < 0 ? -1 : doc.indexOf(`${legacyNamesBlockEnd}\n`, start);
  if (start < 0 || end < 0)
    throw new Error(
      `no generated block (${legacyNamesBlockStart} … ${legacyNamesBlockEnd}) in the document`,
    );
  return (
    doc.slice(0, start) +
    legacyNamesMarkdown() +
    doc.slice(end + legacyNamesBlockEnd.length + 1)
  );
}
