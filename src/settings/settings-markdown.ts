import { notImplementedSettings } from "./setting-warnings.js";
import { settingsTable } from "./settings-table.js";

const groupTitles: Readonly<Record<string, string>> = {
  listeners: "Listeners",
  logging: "Logging",
  configuration: "Configuration source",
  xds: "Configuration from a management server (xDS)",
  "rate limiting": "Rate limiting",
  "kv backend": "Key-value store backend (Redis protocol)",
  "mc backend": "Memcached-protocol backend",
  statistics: "Statistics",
  tracing: "Tracing",
};

/** Groups whose whole feature is not built yet. */
const groupsNotBuilt = new Set<string>([]);
const variablesNotBuilt = new Set(
  notImplementedSettings
    .map((n) => n.variable)
    .filter((v) => v !== "BACKEND_TYPE"),
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
    "<!-- Generated from src/settings/settings-table.ts by `make docs`; do not edit. -->",
    "",
    "The service is configured only by environment variables. Every value is checked at start;",
    "all invalid values are reported together and the process exits 1. Durations use Go syntax",
    "(`300ms`, `1.5h`, `2h45m`); booleans accept `1 t T TRUE true True 0 f F FALSE false False`;",
    "maps are `k1:v1,k2:v2`. Settings for features not built yet are accepted and a warning says",
    "they have no effect. `bin/ratelimit --help` prints the same table.",
  ];
  let group = "";
  for (const row of settingsTable) {
    if (row.group !== group) {
      group = row.group;
      out.push("", `## ${groupTitles[group] ?? group}`, "");
      if (groupsNotBuilt.has(group)) {
        out.push(
          "Not implemented in this build yet: accepted and checked, with a warning.",
          "",
        );
      }
      out.push("| variable | default | meaning |", "|---|---|---|");
    }
    const note =
      variablesNotBuilt.has(row.name) && !groupsNotBuilt.has(group)
        ? " *(not implemented yet)*"
        : "";
    out.push(
      `| \`${row.name}\` | ${escapeCell(row.defaultText)} | ${escapeCell(row.meaning)}${note} |`,
    );
  }
  return out.join("\n") + "\n";
}
