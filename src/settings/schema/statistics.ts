// Statistics: which sink (push, tagged push, pull, or log), its address, and the tagged sink's
// rewrite rules (mogrifiers, read from a family of variables named after each rule).

import { parseList, parseMap } from "../env-parsers.js";
import { quote, readEitherSpelling, type EnvReader } from "../env-reader.js";
import {
  durationMs,
  flag,
  integer,
  map,
  oneOf,
  remotePort,
  text,
} from "./codecs.js";
import {
  composite,
  derived,
  setting,
  settingsGroup,
  type SettingsCheck,
  type SettingsOf,
} from "./define.js";

/** Transport of the push-based metrics sink (`PUSHSTATS_PROTOCOL`). */
export type PushStatsProtocol = "tcp" | "udp" | "udp4" | "udp6";
/**
 * The statistics sink in use, derived from `DISABLE_STATS`, `USE_TAGGED_PUSHSTATS`,
 * `USE_PUSHSTATS` and `USE_PULLSTATS` in the reference's order
 * (docs/reference-parity.md#stats-sinks): `none` when disabled, `log` when no sink is switched on
 * (statistics are logged).
 */
export type StatsSinkKind =
  "none" | "tagged-pushstats" | "pushstats" | "pullstats" | "log";

/**
 * One rewrite rule of the tagged push-metrics sink, read from
 * `TAGGED_PUSHSTATS_MOGRIFIERS_<name>_{PATTERN,NAME,TAGS}` (or the
 * `TAGGED_PUSHSTATS_MOGRIFIER_<name>_*` spelling). The first rule whose pattern matches a
 * statistic name rewrites it.
 */
export interface TaggedPushStatsMogrifier {
  /** Name as listed in `TAGGED_PUSHSTATS_MOGRIFIERS`. */
  readonly name: string;
  /** Regular expression source matched against the statistic name (checked to compile). */
  readonly pattern: string;
  /** Output metric name; `$1`, `$2`, … refer to capture groups (`$0` the whole match). */
  readonly metricName: string;
  /** Extra tags, tag name → value template (`$N` allowed), in the order written. */
  readonly tags: Readonly<Record<string, string>>;
}

const pushStatsProtocol = oneOf<PushStatsProtocol>(
  new Map<string, PushStatsProtocol>([
    ["tcp", "tcp"],
    ["udp", "udp"],
    ["udp4", "udp4"],
    ["udp6", "udp6"],
  ]),
  "tcp, udp, udp4 or udp6",
);

/** The statistics switches that decide the sink. */
interface SinkSwitches {
  readonly disableStats: boolean;
  readonly useTaggedPushStats: boolean;
  readonly usePushStats: boolean;
  readonly usePullStats: boolean;
}

const mogrifierList = "TAGGED_PUSHSTATS_MOGRIFIERS";
const mogrifierListAlias = "USE_TAGGED_PUSHSTATS_MOGRIFIERS";
const mogrifierAlias = "TAGGED_PUSHSTATS_MOGRIFIER";
const mogrifierParts = [
  {
    suffix: "PATTERN",
    meaning:
      "Regular expression matched against statistic names (required per mogrifier).",
  },
  {
    suffix: "NAME",
    meaning:
      "Metric name; $1, $2, … refer to pattern groups (required per mogrifier).",
  },
  {
    suffix: "TAGS",
    meaning: "Extra tags as k1:v1,k2:v2; values may use $N.",
  },
] as const;

/**
 * Reads the tagged sink's rewrite rules. Checks mirror the reference's startup failures
 * (docs/reference-parity.md#mogrifiers): PATTERN and NAME required, PATTERN must compile, TAGS is a
 * `k:v` map whose keys and values are non-empty.
 */
function readMogrifiers(reader: EnvReader): TaggedPushStatsMogrifier[] {
  const list = readEitherSpelling(reader, mogrifierList, mogrifierListAlias);
  const names = list === undefined ? [] : parseList(list.text);
  const mogrifiers: TaggedPushStatsMogrifier[] = [];
  for (const name of names) {
    const variable = (part: string): string =>
      `${mogrifierList}_${name}_${part}`;
    const alias = (part: string): string => `${mogrifierAlias}_${name}_${part}`;
    const context = `for mogrifier ${quote(name)}`;

    let valid = true;
    const pattern = readEitherSpelling(
      reader,
      variable("PATTERN"),
      alias("PATTERN"),
    );
    if (pattern === undefined || pattern.text === "") {
      if (reader.allValid(variable("PATTERN"))) {
        reader.problem(
          `${variable("PATTERN")} is not set: expected a regular expression ${context}`,
        );
      }
      valid = false;
    } else {
      try {
        new RegExp(pattern.text);
      } catch (err) {
        const reason = err instanceof SyntaxError ? err.message : String(err);
        reader.problem(
          `${pattern.name}=${quote(pattern.text)}: ${reason}; expected a regular expression ${context}`,
        );
        valid = false;
      }
    }

    const metricName = readEitherSpelling(
      reader,
      variable("NAME"),
      alias("NAME"),
    );
    if (metricName === undefined || metricName.text === "") {
      if (reader.allValid(variable("NAME"))) {
        reader.problem(
          `${variable("NAME")} is not set: expected a metric name ${context}`,
        );
      }
      valid = false;
    }

    let tags: Record<string, string> = {};
    const tagsText = readEitherSpelling(
      reader,
      variable("TAGS"),
      alias("TAGS"),
    );
    if (tagsText !== undefined) {
      tags = reader.read(tagsText.name, {}, parseMap);
      for (const [tagName, tagValue] of Object.entries(tags)) {
        if (tagName === "" || tagValue === "") {
          reader.problem(
            `${tagsText.name}=${quote(tagsText.text)}: tag ${quote(`${tagName}:${tagValue}`)} has an empty ${tagName === "" ? "name" : "value"}; expected name:value pairs ${context}`,
          );
          valid = false;
        }
      }
    }

    if (valid && pattern !== undefined && metricName !== undefined) {
      mogrifiers.push({
        name,
        pattern: pattern.text,
        metricName: metricName.text,
        tags,
      });
    }
  }
  return mogrifiers;
}

export const statistics = settingsGroup("statistics", {
  /** The sink in use, derived (see {@link StatsSinkKind}); "pushstats" with the defaults. */
  statsSink: derived((settings: SinkSwitches): StatsSinkKind => {
    if (settings.disableStats) return "none";
    if (settings.useTaggedPushStats) return "tagged-pushstats";
    if (settings.usePushStats) return "pushstats";
    if (settings.usePullStats) return "pullstats";
    return "log";
  }),
  /** Disable statistics; wins over every sink switch. */
  disableStats: setting({
    env: "DISABLE_STATS",
    codec: flag,
    default: false,
    meaning: "Disable statistics (wins over every sink switch).",
  }),
  /** Milliseconds between flushes, > 0 (Go duration). */
  statsFlushIntervalMs: setting({
    env: "STATS_FLUSH_INTERVAL",
    codec: durationMs("positive"),
    default: 10 * 1000,
    meaning: "Time between statistics flushes.",
  }),
  /**
   * Keep the process statistics `ratelimit.runtime.*` (event-loop delay, GC pauses, heap, RSS;
   * see `startRuntimeStats`) and, on the memory backend, `ratelimit.memory.keys`.
   */
  runtimeStatsEnabled: setting({
    env: "RUNTIME_STATS_ENABLED",
    codec: flag,
    default: false,
    meaning:
      "Add event-loop delay, GC pause, heap and RSS statistics (ratelimit.runtime.*).",
  }),
  /** Tags added to every statistic, from `k1:v1,k2:v2`. */
  extraTags: setting({
    env: "EXTRA_TAGS",
    codec: map,
    default: {},
    meaning: "Tags added to every statistic, as k1:v1,k2:v2.",
  }),
  /** Push-based metrics sink; `false` logs statistics instead. */
  usePushStats: setting({
    env: "USE_PUSHSTATS",
    codec: flag,
    default: true,
    meaning:
      "Push-based metrics sink; set false to log statistics or to use another sink.",
  }),
  /** Push-based metrics host. */
  pushStatsHost: setting({
    env: "PUSHSTATS_HOST",
    codec: text,
    default: "localhost",
    meaning: "Push-based metrics host.",
  }),
  /** Push-based metrics port, 1–65535. */
  pushStatsPort: setting({
    env: "PUSHSTATS_PORT",
    codec: integer(remotePort),
    default: 8125,
    meaning: "Push-based metrics port.",
  }),
  /** Push-based metrics transport: tcp, udp, udp4 or udp6. */
  pushStatsProtocol: setting({
    env: "PUSHSTATS_PROTOCOL",
    codec: pushStatsProtocol,
    default: "tcp",
    meaning: "tcp, udp, udp4 or udp6.",
  }),
  /** Tagging variant of the push sink, sent over UDP. */
  useTaggedPushStats: setting({
    env: "USE_TAGGED_PUSHSTATS",
    codec: flag,
    default: false,
    meaning: "Tagged push-based metrics sink (needs USE_PUSHSTATS=false).",
  }),
  /** Pull-based metrics exporter. */
  /**
   * Rewrite rules of the tagged sink, in priority order, named by `TAGGED_PUSHSTATS_MOGRIFIERS`
   * (or `USE_TAGGED_PUSHSTATS_MOGRIFIERS`). Read and checked only while the tagged sink is the
   * one in use, as in the reference; empty otherwise.
   */
  taggedPushStatsMogrifiers: composite({
    variables: [
      {
        name: mogrifierList,
        defaultText: "(empty)",
        meaning: "Comma-separated mogrifier names, in priority order.",
      },
      {
        name: mogrifierListAlias,
        defaultText: "(empty)",
        meaning: `Other spelling of ${mogrifierList}.`,
      },
      ...mogrifierParts.map((part) => ({
        name: `${mogrifierList}_<M>_${part.suffix}`,
        defaultText: "(empty)",
        meaning: part.meaning,
      })),
      ...mogrifierParts.map((part) => ({
        name: `${mogrifierAlias}_<M>_${part.suffix}`,
        defaultText: "(empty)",
        meaning: `Other spelling of ${mogrifierList}_<M>_${part.suffix}.`,
      })),
    ],
    default: [] as readonly TaggedPushStatsMogrifier[],
    read: (reader, settings: SinkSwitches) =>
      settings.useTaggedPushStats && !settings.disableStats
        ? readMogrifiers(reader)
        : [],
  }),
  usePullStats: setting({
    env: "USE_PULLSTATS",
    codec: flag,
    default: false,
    meaning: "Pull-based metrics exporter (needs USE_PUSHSTATS=false).",
  }),
  /** Listen address of the exporter. */
  pullStatsAddr: setting({
    env: "PULLSTATS_ADDR",
    codec: text,
    default: ":9090",
    meaning: "Exporter listen address.",
  }),
  /** HTTP path of the exporter. */
  pullStatsPath: setting({
    env: "PULLSTATS_PATH",
    codec: text,
    default: "/metrics",
    meaning: "Exporter HTTP path.",
  }),
  /** Mapping file replacing the built-in mapping; "" uses the built-in one. */
  pullStatsMapperYaml: setting({
    env: "PULLSTATS_MAPPER_YAML",
    codec: text,
    default: "",
    meaning: "Mapping file replacing the built-in mapping.",
  }),
  /**
   * Keep `response_time` in milliseconds in the built-in mapping
   * .
   */
  pullStatsResponseTimeAsMilliseconds: setting({
    env: "PULLSTATS_RESPONSE_TIME_AS_MILLISECONDS",
    codec: flag,
    default: false,
    meaning: "Keep response_time in milliseconds in the built-in mapping.",
  }),
});

/**
 * Statistics sinks: at most one, unless statistics are disabled
 * (docs/reference-parity.md#stats-sinks).
 */
export const statisticsChecks: readonly SettingsCheck<
  SettingsOf<typeof statistics>
>[] = [
  (settings, reader) => {
    const sinkSwitches = [
      ["USE_TAGGED_PUSHSTATS", settings.useTaggedPushStats],
      ["USE_PUSHSTATS", settings.usePushStats],
      ["USE_PULLSTATS", settings.usePullStats],
    ] as const;
    if (
      settings.disableStats ||
      !reader.allValid("DISABLE_STATS", ...sinkSwitches.map(([name]) => name))
    )
      return;
    const enabled = sinkSwitches.filter(([, on]) => on).map(([name]) => name);
    if (enabled.length > 1) {
      const pushByDefault =
        enabled.includes("USE_PUSHSTATS") && !reader.isSet("USE_PUSHSTATS");
      reader.problem(
        `${enabled.map((name) => `${name}=true`).join(" and ")}${pushByDefault ? " (USE_PUSHSTATS is true by default)" : ""}: ` +
          "expected at most one statistics sink; set the others to false" +
          (pushByDefault ? ", e.g. USE_PUSHSTATS=false" : ""),
      );
    }
  },
];
