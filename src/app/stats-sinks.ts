import { readFile } from "node:fs/promises";
import type { AppContext } from "./app-context.js";
import { SettingsError } from "../settings/settings-error.js";
import type { Settings } from "../settings/settings.js";
import type { StatTag } from "../stats/names.js";
import type { PullMapping } from "../stats/prometheus-mapping.js";
import type { ScrapedGauge } from "../stats/scraped-gauge.js";
import {
  startStatsFlusher,
  type StatsFlusher,
} from "../stats/stats-flusher.js";
import type { StatsSink } from "../stats/stats-sink.js";

// Each sink's module (and its library: hot-shots, prom-client) is imported only when the
// settings choose it: a process loads what it uses (idle memory, startup time).

/** Running statistics sinks (push, tagged push, pull, stdout). */
export interface StatsSinks {
  /** Flushes once more and stops; idempotent. */
  close(): Promise<void>;
  /** Flushes now (counters as deltas, gauges, timer durations); a no-op when disabled. */
  flush(): void;
  /** `host:port` the pull exporter is bound to, when `USE_PULLSTATS` runs it. */
  readonly pullAddress: string | undefined;
}

const quote = (text: string): string => JSON.stringify(text);

/**
 * Reads the pull mapping: `PULLSTATS_MAPPER_YAML` when set, else the built-in one.
 *
 * @throws {@link SettingsError} naming `PULLSTATS_MAPPER_YAML`, the file and the line when the
 * file cannot be read or is not a valid mapping
 */
async function loadPullMapping(settings: Settings): Promise<PullMapping> {
  const { builtInPullMapping } =
    await import("../stats/prometheus-builtin-mapping.js");
  const { parsePullMapping } =
    await import("../stats/prometheus-mapping-parser.js");
  const { PullMappingError } = await import("../stats/prometheus-mapping.js");
  const path = settings.pullStatsMapperYaml;
  if (path === "")
    return builtInPullMapping(settings.pullStatsResponseTimeAsMilliseconds);
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    throw new SettingsError(
      [
        `PULLSTATS_MAPPER_YAML=${quote(path)}: cannot read the mapping file (${err instanceof Error ? err.message : String(err)})`,
      ],
      { cause: err },
    );
  }
  try {
    return parsePullMapping(text, path);
  } catch (err) {
    if (err instanceof PullMappingError) {
      const where = err.line > 0 ? `line ${err.line}: ` : "";
      throw new SettingsError(
        [`PULLSTATS_MAPPER_YAML=${quote(path)}: ${where}${err.problem}`],
        { cause: err },
      );
    }
    throw err;
  }
}

/**
 * Starts the statistics sink chosen by the settings (docs/reference-parity.md#stats-sinks) and its
 * flush loop every `STATS_FLUSH_INTERVAL`:
 * - `DISABLE_STATS=true`: nothing leaves the process (statistics still count for `/stats`);
 * - `USE_TAGGED_PUSHSTATS`: DogStatsD-style lines with tags and mogrifiers over UDP;
 * - `USE_PUSHSTATS` (default): statsd lines to `PUSHSTATS_HOST:PUSHSTATS_PORT` over
 *   `PUSHSTATS_PROTOCOL`;
 * - `USE_PULLSTATS`: Prometheus metrics at `PULLSTATS_ADDR` + `PULLSTATS_PATH`;
 * - none of them: one JSON line per statistic per flush on standard output.
 * `EXTRA_TAGS` are added to every statistic.
 *
 * @throws {@link SettingsError} for an unreadable or invalid `PULLSTATS_MAPPER_YAML` or a
 * malformed `PULLSTATS_ADDR`
 * @param scrapedGauges - gauges the pull exporter computes at each scrape (the top offenders
 *   with `TOP_OFFENDERS_METRICS`); other sinks ignore them
 * @throws the listen error when the pull exporter's address cannot be bound
 */
export async function startStatsSinks(
  settings: Settings,
  context: AppContext,
  scrapedGauges: readonly ScrapedGauge[] = [],
): Promise<StatsSinks> {
  const logger = context.logger.child({ component: "stats" });
  const store = context.statsManager.store;
  const extraTags: StatTag[] = Object.entries(settings.extraTags).map(
    ([key, value]) => ({ key, value }),
  );
  // The pull exporter flushes before each scrape; the flusher exists only once it has a sink.
  const flushRef: { current: StatsFlusher | undefined } = {
    current: undefined,
  };
  let pullAddress: string | undefined;
  let sink: StatsSink;
  switch (settings.statsSink) {
    case "none":
      logger.info("statistics disabled");
      return {
        close: () => Promise.resolve(),
        flush: () => undefined,
        pullAddress: undefined,
      };
    case "log": {
      const { createStdoutSink } = await import("../stats/stdout-sink.js");
      sink = createStdoutSink({ clock: context.clock });
      break;
    }
    case "pushstats":
    case "tagged-pushstats": {
      const { createStatsdSink } = await import("../stats/statsd-sink.js");
      sink = createStatsdSink({
        host: settings.pushStatsHost,
        port: settings.pushStatsPort,
        protocol: settings.pushStatsProtocol,
        logger,
        ...(settings.statsSink === "tagged-pushstats"
          ? { tagged: { mogrifiers: settings.taggedPushStatsMogrifiers } }
          : {}),
      });
      break;
    }
    case "pullstats": {
      const { parseListenAddress, startPrometheusSink } =
        await import("../stats/prometheus-sink.js");
      let listen: { host: string; port: number };
      try {
        listen = parseListenAddress(settings.pullStatsAddr);
      } catch (err) {
        throw new SettingsError(
          [
            `PULLSTATS_ADDR=${quote(settings.pullStatsAddr)}: expected [host]:port, e.g. :9090`,
          ],
          { cause: err },
        );
      }
      const pull = await startPrometheusSink({
        mapping: await loadPullMapping(settings),
        host: listen.host,
        port: listen.port,
        path: settings.pullStatsPath,
        logger,
        beforeScrape: () => flushRef.current?.flush(),
        scrapedGauges,
      });
      pullAddress = pull.address;
      logger.warn(
        { address: pull.address, path: settings.pullStatsPath },
        `serving pull statistics on '${pull.address}${settings.pullStatsPath}'`,
      );
      sink = pull;
      break;
    }
  }
  const running = startStatsFlusher({
    store,
    sink,
    intervalMs: settings.statsFlushIntervalMs,
    extraTags,
    onError: (err) => {
      logger.error({ err }, "statistics flush failed");
    },
  });
  flushRef.current = running;
  return {
    close: () => running.close(),
    flush: () => {
      running.flush();
    },
    pullAddress,
  };
}
