// The settings schema: every environment variable of the service, declared once.
//
// Each file of this folder declares the settings of one concern (listeners.ts, logging.ts,
// configuration.ts, xds.ts, rate-limiting.ts, rlqs.ts, admin.ts, kv.ts, mc.ts, statistics.ts, tracing.ts) as one
// `settingsGroup(...)`. From these declarations alone derive:
//   - the `Settings` type (field name = declaration key, field type = the codec's value type,
//     TSDoc = the comment on the declaration)            -> ../settings.ts
//   - the parse with every problem collected (`loadSettings`) and `settingsDefaults`
//                                                         -> ../settings.ts
//   - the `--help` lines and docs/settings.md (`make docs`) -> ../settings-table.ts,
//                                                            ../settings-markdown.ts
//   - deprecation / not-implemented warnings              -> ../setting-warnings.ts
//
// HOW TO ADD A SETTING: one declaration, in the file of its concern (a new concern: a new file
// with its own `settingsGroup`, listed in `settingsGroups` below and in `Settings`):
//
//   /** TSDoc for consumers of `settings.backendProbeIntervalMs`: meaning, unit, source of the rule. */
//   backendProbeIntervalMs: setting({
//     env: "BACKEND_PROBE_INTERVAL",          // the variable; the spec's neutral names
//     codec: durationMs("positive"),          // parse + validation + how the default is spelled
//     default: 1_000,                         // value when unset (same type as the codec's)
//     meaning: "Time between probes of a failed backend.", // one line, ends with a period
//   }),
//
// Codecs (./codecs.ts): text, flag, integer(range), float(range?), ratio, durationMs(bound)
// (milliseconds; fields end in `Ms`), list, map, oneOf(words, expected, {fold, format}) for
// enumerations (export the value union as a type from the schema file and re-export it from
// ../settings.ts), custom(parse, format) for anything else; a parse throws `EnvParseError`.
// Optional: `unit` (bytes, seconds, … when the name does not say it), `secret` (value kept out
// of errors), `defaultText` (when the formatted default would mislead), `resolve` (post-parse
// touch), `deprecatedWhen` / `notImplemented` (warnings at startup).
// Rules across settings ("TLS needs a certificate") go in the file's `…Checks` array, listed in
// `settingsChecks` below; each check skips itself unless `reader.allValid(...)`.
// Tests that pin the whole table (test/unit/settings/settings-table.test.ts) pick a new
// declaration up by themselves; add a test for its parse and its effect, then run `make docs`.

import type {
  AnyDeclaration,
  Declarations,
  SettingsCheck,
  SettingsGroup,
  SettingsOf,
} from "./define.js";
import { admin } from "./admin.js";
import { configuration } from "./configuration.js";
import { kv, kvChecks } from "./kv.js";
import { listenerChecks, listeners } from "./listeners.js";
import { logging } from "./logging.js";
import { mc, mcChecks } from "./mc.js";
import { rateLimiting, rateLimitingChecks } from "./rate-limiting.js";
import { rlqs } from "./rlqs.js";
import { statistics, statisticsChecks } from "./statistics.js";
import { tracing } from "./tracing.js";
import { xds } from "./xds.js";

/** Every group, in table order (the order of `--help`, docs/settings.md and reading). */
export const settingsGroups = Object.freeze([
  listeners,
  logging,
  configuration,
  xds,
  rateLimiting,
  rlqs,
  admin,
  kv,
  mc,
  statistics,
  tracing,
] as const);

/** One declaration with its field name and group. */
export interface DeclarationEntry {
  readonly field: string;
  readonly group: SettingsGroup;
  readonly declaration: AnyDeclaration;
}

/** Every declaration of every group, in table order. */
export const declarationEntries: readonly DeclarationEntry[] = Object.freeze(
  settingsGroups.flatMap(({ group, declarations }) => {
    const all: Declarations = declarations;
    return Object.entries(all).map(([field, declaration]) =>
      Object.freeze({
        field,
        group,
        declaration: declaration as AnyDeclaration,
      }),
    );
  }),
);

/** The parsed settings as derived from the schema; `Settings` in ../settings.ts. */
export type SchemaSettings = SettingsOf<typeof listeners> &
  SettingsOf<typeof logging> &
  SettingsOf<typeof configuration> &
  SettingsOf<typeof xds> &
  SettingsOf<typeof rateLimiting> &
  SettingsOf<typeof rlqs> &
  SettingsOf<typeof admin> &
  SettingsOf<typeof kv> &
  SettingsOf<typeof mc> &
  SettingsOf<typeof statistics> &
  SettingsOf<typeof tracing>;

/** Combination checks, in the order their problems are reported. */
export const settingsChecks: readonly SettingsCheck<SchemaSettings>[] =
  Object.freeze([
    ...rateLimitingChecks,
    ...statisticsChecks,
    ...listenerChecks,
    ...kvChecks,
    ...mcChecks,
  ]);

export type { SettingsGroup } from "./define.js";
export type { LogFormat, LogLevel } from "./logging.js";
export type { GrpcHttp2Engine } from "./listeners.js";
export type { ConfigType } from "./configuration.js";
export type {
  BackendFailureMode,
  BackendType,
  ChargeMode,
} from "./rate-limiting.js";
export type { KvPoolOnEmptyBehavior, KvSocketType, KvType } from "./kv.js";
export type {
  PushStatsProtocol,
  StatsSinkKind,
  TaggedPushStatsMogrifier,
} from "./statistics.js";
export type { TracingExporterProtocol } from "./tracing.js";
