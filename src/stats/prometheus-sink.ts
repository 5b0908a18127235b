import { createServer, type Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import type { Logger } from "pino";
import {
  collectDefaultMetrics,
  Counter,
  Gauge,
  Histogram,
  Registry,
  Summary,
} from "prom-client";
import { createPullMapper, labelNamesByMetric } from "./prometheus-mapper.js";
import type {
  MappedStat,
  PullMapping,
  StatKind,
} from "./prometheus-mapping.js";
import type { ScrapedGauge } from "./scraped-gauge.js";
import type { StatsSink } from "./stats-sink.js";
import type { TimerListener } from "./stats-store.js";

/** Options of {@link startPrometheusSink}. */
export interface PrometheusSinkOptions {
  /** Mapping from statistic names to metrics (built-in or `PULLSTATS_MAPPER_YAML`). */
  readonly mapping: PullMapping;
  /** Listen host; "" = every interface (`PULLSTATS_ADDR` host part). */
  readonly host: string;
  /** Listen port; 0 picks a free one (`PULLSTATS_ADDR` port part). */
  readonly port: number;
  /** HTTP path of the metrics (`PULLSTATS_PATH`). @defaultValue "/metrics" */
  readonly path?: string;
  /** Where mapping conflicts and server errors are reported. */
  readonly logger: Logger;
  /**
   * Also export the Node.js process metrics of prom-client (CPU, memory, event loop, GC),
   * as the reference exports its Go process metrics. @defaultValue true
   */
  readonly processMetrics?: boolean;
  /** Called before each scrape, e.g. to flush pending counters so a scrape is current. */
  readonly beforeScrape?: () => void;
  /**
   * Gauges computed at each scrape (the top offenders with `TOP_OFFENDERS_METRICS`), their
   * series replaced every time. @defaultValue none
   */
  readonly scrapedGauges?: readonly ScrapedGauge[];
}

/** The pull sink: a {@link StatsSink} that also serves the metrics over HTTP. */
export interface PrometheusSink extends StatsSink {
  /** `host:port` actually bound. */
  readonly address: string;
  /** The metrics, in the Prometheus text format. */
  metricsText(): Promise<string>;
}

/**
 * Splits a listen address: `:9090` (every interface), `host:9090`, `[::1]:9090`.
 *
 * @throws RangeError when there is no port or it is not 0–65535
 */
export function parseListenAddress(address: string): {
  host: string;
  port: number;
} {
  const m = /^(?:\[([^\]]*)\]|([^:]*)):(\d{1,5})$/.exec(address);
  const port = Number(m?.[3]);
  if (m === null || port > 65535) {
    throw new RangeError(
      `invalid listen address "${address}": expected [host]:port, e.g. :9090`,
    );
  }
  return { host: m[1] ?? m[2] ?? "", port };
}

type PromMetric = Counter | Gauge | Histogram | Summary;

interface Registered {
  readonly type: MappedStat["type"];
  readonly labelNames: ReadonlySet<string>;
  readonly metric: PromMetric;
}

/**
 * Starts the pull sink: statistics are turned into prom-client metrics by the mapping (like the
 * reference's embedded statsd_exporter: counters → counters, gauges → gauges, timers →
 * histograms or summaries of their durations times the rule's `scale`) and served at `path`.
 * Counters and gauges arrive at each flush (and before each scrape); timer durations are
 * observed when recorded, so histograms are exact.
 *
 * A statistic whose metric name was first seen with another type or other label names is
 * dropped and logged once (statsd_exporter does the same).
 *
 * @throws the listen error (e.g. EADDRINUSE) when the address cannot be bound
 */
export async function startPrometheusSink(
  options: PrometheusSinkOptions,
): Promise<PrometheusSink> {
  const { logger } = options;
  const path = options.path ?? "/metrics";
  const registry = new Registry();
  if (options.processMetrics ?? true)
    collectDefaultMetrics({ register: registry });
  const mapper = createPullMapper(options.mapping);
  const ruleLabels = labelNamesByMetric(options.mapping);
  const metrics = new Map<string, Registered>();
  const reported = new Set<string>();
  for (const source of options.scrapedGauges ?? []) {
    new Gauge({
      name: source.name,
      help: source.help,
      labelNames: [...source.labelNames],
      registers: [registry],
      collect() {
        // Replaced, never accumulated: a series not produced now is gone from this scrape.
        this.reset();
        for (const sample of source.samples())
          this.set(sample.labels, sample.value);
      },
    });
  }

  const reportOnce = (key: string, fields: object, msg: string): void => {
    if (reported.has(key)) return;
    reported.add(key);
    logger.warn(fields, msg);
  };

  /** The prom-client metric for a mapped statistic, created on first use. */
  function metricFor(stat: string, mapped: MappedStat): PromMetric | undefined {
    const labelNames = Object.keys(mapped.labels);
    const existing = metrics.get(mapped.name);
    if (existing !== undefined) {
      if (
        existing.type === mapped.type &&
        labelNames.every((label) => existing.labelNames.has(label))
      ) {
        return existing.metric;
      }
      reportOnce(
        `${stat}\0${mapped.name}`,
        {
          stat,
          metric: mapped.name,
          type: mapped.type,
          labels: labelNames,
          registeredType: existing.type,
          registeredLabels: [...existing.labelNames],
        },
        "statistic dropped from the pull exporter: its metric exists with another type or labels",
      );
      return undefined;
    }
    const declared = [
      ...new Set([...labelNames, ...(ruleLabels.get(mapped.name) ?? [])]),
    ];
    const config = {
      name: mapped.name,
      help: mapped.help,
      labelNames: declared,
      registers: [registry],
    };
    let metric: PromMetric;
    try {
      switch (mapped.type) {
        case "counter":
          metric = new Counter(config);
          break;
        case "gauge":
          metric = new Gauge(config);
          break;
        case "histogram":
          metric = new Histogram({ ...config, buckets: [...mapped.buckets] });
          break;
        case "summary":
          metric = new Summary({
            ...config,
            percentiles: mapped.quantiles.map((q) => q.quantile),
            ...(mapped.maxAgeSeconds !== undefined
              ? {
                  maxAgeSeconds: mapped.maxAgeSeconds,
                  ageBuckets: mapped.ageBuckets ?? 5,
                }
              : {}),
          });
          break;
      }
    } catch (err) {
      reportOnce(
        `${stat}\0${mapped.name}`,
        { err, stat, metric: mapped.name },
        "statistic dropped from the pull exporter: invalid metric",
      );
      return undefined;
    }
    metrics.set(mapped.name, {
      type: mapped.type,
      labelNames: new Set(declared),
      metric,
    });
    return metric;
  }

  function resolve(
    stat: string,
    kind: StatKind,
  ): { mapped: MappedStat; metric: PromMetric } | undefined {
    const mapped = mapper(stat, kind);
    if (mapped === undefined) return undefined;
    const metric = metricFor(stat, mapped);
    return metric === undefined ? undefined : { mapped, metric };
  }

  function observer(stat: string): TimerListener | undefined {
    const target = resolve(stat, "observer");
    if (target === undefined) return undefined;
    const { mapped, metric } = target;
    if (!(metric instanceof Histogram || metric instanceof Summary))
      return undefined;
    const scale = mapped.scale;
    const labels = mapped.labels;
    return (durationMs) => {
      metric.observe(labels, durationMs * scale);
    };
  }

  const server: Server = createServer((req, res) => {
    const url = (req.url ?? "/").split("?", 1)[0];
    if (url !== path || (req.method !== "GET" && req.method !== "HEAD")) {
      res.statusCode = 404;
      res.end(`not found; metrics are at ${path}\n`);
      return;
    }
    options.beforeScrape?.();
    registry.metrics().then(
      (text) => {
        res.setHeader("content-type", registry.contentType);
        res.end(req.method === "HEAD" ? undefined : text);
      },
      (err: unknown) => {
        logger.error({ err }, "cannot render metrics");
        res.statusCode = 500;
        res.end("cannot render metrics\n");
      },
    );
  });
  const sockets = new Set<Socket>();
  server.on("connection", (socket: Socket) => {
    sockets.add(socket);
    socket.once("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolveListen, reject) => {
    server.once("error", reject);
    const listening = (): void => {
      server.off("error", reject);
      resolveListen();
    };
    if (options.host === "") server.listen(options.port, listening);
    else server.listen(options.port, options.host, listening);
  });
  server.unref();
  server.on("error", (err) => {
    logger.error({ err }, "pull exporter server error");
  });
  const bound = server.address() as AddressInfo;
  const host = options.host === "" ? "" : bound.address;
  const address = host.includes(":")
    ? `[${host}]:${bound.port}`
    : `${host}:${bound.port}`;

  let closing: Promise<void> | undefined;
  return {
    address,
    metricsText: () => registry.metrics(),
    flushCounter(name, delta) {
      const target = resolve(name, "counter");
      if (target?.metric instanceof Counter)
        target.metric.inc(target.mapped.labels, delta);
    },
    flushGauge(name, value) {
      const target = resolve(name, "gauge");
      if (target?.metric instanceof Gauge)
        target.metric.set(target.mapped.labels, value);
    },
    flushTimer(name, durationMs) {
      observer(name)?.(durationMs);
    },
    timerListener: observer,
    endFlush() {
      // Values are in the registry already; a scrape reads them.
    },
    close() {
      closing ??= new Promise<void>((done) => {
        server.close(() => {
          done();
        });
        for (const socket of sockets) socket.destroy();
      });
      return closing;
    },
  };
}
