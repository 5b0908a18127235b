// docs/settings.md, generated from the settings table (itself derived from ./schema/).

import { settingsGroupTitles } from "./schema/define.js";
import { notImplementedSettings } from "./setting-warnings.js";
import { settingsTable, type SettingsGroup } from "./settings-table.js";

/** Groups whose whole feature is not built yet. */
const groupsNotBuilt = new Set<SettingsGroup>([]);
const variablesNotBuilt = new Set(
  notImplementedSettings.map((n) => n.variable),
);

const escapeCell = (text: string): string => text.replace(/\|/g, "\\|");

/**
 * Returns `docs/settings.md`: every environment variable of {@link settingsTable} in
 * Markdown tables, one per group. `make docs` writes it; a test keeps the file fresh.
 */
export function settingsMarkdown(): string {
  const out: string[] = [
    "# Settings",
    "",
    "<!-- Generated from the declarations in src/settings/schema/ by `make docs`; do not edit. -->",
    "",
    "The service is configured only by environment variables. Every value is checked at start;",
    "all invalid values are reported together and the process exits 1. Durations use Go syntax",
    "(`300ms`, `1.5h`, `2h45m`); booleans accept `1 t T TRUE true True 0 f F FALSE false False`;",
    "maps are `k1:v1,k2:v2`. Settings for features not built yet are accepted and a warning says",
    "they have no effect. `bin/ratelimit --help` prints the same table.",
  ];
  let group: SettingsGroup | undefined;
  for (const row of settingsTable) {
    if (row.group !== group) {
      group = row.group;
      out.push("", `## ${settingsGroupTitles[row.group]}`, "");
      if (groupsNotBuilt.has(row.group)) {
        out.push(
          "Not implemented in this build yet: accepted and checked, with a warning.",
          "",
        );
      }
      out.push("| variable | default | meaning |", "|---|---|---|");
    }
    const note =
      variablesNotBuilt.has(row.name) && !groupsNotBuilt.has(row.group)
        ? " *(not implemented yet)*"
        : "";
    out.push(
      `| \`${row.name}\` | ${escapeCell(row.defaultText)} | ${escapeCell(row.meaning)}${note} |`,
    );
  }
  return out.join("\n") + "\n";
}
