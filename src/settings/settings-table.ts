// The settings table printed by `--help` and written to docs/settings.md, derived from the
// schema's declarations (./schema/).

import { declarationEntries, type SettingsGroup } from "./schema/index.js";

export type { SettingsGroup } from "./schema/index.js";

/** One environment variable, as documented in `--help` and the README settings table. */
export interface SettingsTableRow {
  /** Variable name; `<M>` stands for a mogrifier name. */
  readonly name: string;
  readonly group: SettingsGroup;
  /** The default as one would write it in the environment, or a description in parentheses. */
  readonly defaultText: string;
  /** One-line meaning. */
  readonly meaning: string;
}

/**
 * Every environment variable the service reads, in documentation order, with its default
 * (written the way the environment would spell it) and a one-line meaning. Printed by `--help`
 * and used to generate docs/settings.md.
 */
export const settingsTable: readonly SettingsTableRow[] = Object.freeze(
  declarationEntries
    .flatMap(({ group, declaration }): SettingsTableRow[] => {
      switch (declaration.kind) {
        case "setting":
          return [
            {
              name: declaration.env,
              group,
              defaultText:
                declaration.defaultText ??
                declaration.codec.format(declaration.default),
              meaning: declaration.meaning,
            },
          ];
        case "composite":
          return declaration.variables.map((variable) => ({
            name: variable.name,
            group,
            defaultText: variable.defaultText,
            meaning: variable.meaning,
          }));
        case "derived":
          return [];
      }
    })
    .map((row) => Object.freeze(row)),
);
