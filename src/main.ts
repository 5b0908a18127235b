import cluster from "node:cluster";
import { createApp, type App } from "./app/create-app.js";
import {
  isGroupMessage,
  type ToPrimary,
  type ToWorker,
  type WorkerChannel,
} from "./app/worker-messages.js";
import { WorkerRelay } from "./app/worker-relay.js";
import { legacyNameWarnings } from "./settings/legacy-names.js";
import { SettingsError } from "./settings/settings-error.js";
import { settingsMarkdown } from "./settings/settings-markdown.js";
import { settingsTable } from "./settings/settings-table.js";
import { loadSettings } from "./settings/settings.js";
import { createLogger } from "./telemetry/logger.js";
import { compactHeapNow } from "./util/compact-heap.js";
import { versionLine } from "./util/version.js";

// Process entry point: the one place that reads process.env and calls process.exit.

const usageLine = "usage: ratelimit [--help | --version]";

function usage(): string {
  const width = Math.max(...settingsTable.map((r) => r.name.length));
  const lines = [
    usageLine,
    "",
    "Envoy rate-limit service (RLS v3). Configured only by environment variables:",
    "",
  ];
  let group = "";
  for (const row of settingsTable) {
    if (row.group !== group) {
      group = row.group;
      lines.push(`${group}:`);
    }
    lines.push(
      `  ${row.name.padEnd(width)}  ${row.meaning} (default: ${row.defaultText})`,
    );
  }
  return lines.join("\n") + "\n";
}

// The service takes no arguments but these, each answered before anything starts; anything
// else is refused, so a mistyped flag never starts a service on the defaults.
const args = process.argv.slice(2);
const version = (): string => `${versionLine("ratelimit")}\n`;
const answers = new Map<string, () => string>([
  ["--help", usage],
  ["-help", usage],
  ["-h", usage],
  ["--help-markdown", settingsMarkdown],
  ["--version", version],
  ["-version", version],
]);
if (args.length > 0) {
  const answer = answers.get(args[0] ?? "");
  if (answer === undefined || args.length > 1) {
    const unknown = answer === undefined ? args[0] : args[1];
    process.stderr.write(
      `ratelimit: unknown argument ${JSON.stringify(unknown)}\n${usageLine}\n` +
        "Configured by environment variables only; `ratelimit --help` lists them.\n",
    );
    process.exit(2);
  }
  process.stdout.write(answer());
  process.exit(0);
}

let loaded;
try {
  loaded = loadSettings(process.env);
} catch (err) {
  // The reference's names, not read, are often why settings fail: say so next to the error.
  for (const warning of legacyNameWarnings(process.env))
    process.stderr.write(`ratelimit: warning: ${warning}\n`);
  process.stderr.write(
    `ratelimit: ${err instanceof SettingsError ? err.message : String(err)}\n`,
  );
  process.exit(1);
}
const { settings, warnings } = loaded;
const logger = createLogger({
  level: settings.logLevel,
  format: settings.logFormat,
});
for (const warning of warnings) logger.warn(warning);

process.on("uncaughtException", (err) => {
  logger.fatal({ err }, "uncaught exception");
  process.exit(1);
});
process.on("unhandledRejection", (err) => {
  logger.fatal({ err }, "unhandled promise rejection");
  process.exit(1);
});

if (settings.workers > 1 && cluster.isPrimary) {
  superviseWorkers(settings.workers);
} else {
  await runService(Number(process.env["RATELIMIT_WORKER_INDEX"] ?? "0"));
}

/** Runs the service in this process (the only one, or one worker of several). */
async function runService(workerIndex: number): Promise<void> {
  let app: App;
  let stopTracing: (() => Promise<void>) | undefined;
  try {
    stopTracing = await startTracingIfEnabled();
    app = await createApp(settings, {
      logger,
      workerIndex,
      ...(cluster.isWorker ? { workerChannel: primaryChannel() } : {}),
    });
    // Start-up garbage out before the listeners open (idle RSS, docs/performance.md).
    const compactStartMs = performance.now();
    if (compactHeapNow())
      logger.debug(
        { ms: Math.round(performance.now() - compactStartMs) },
        "heap compacted after start-up",
      );
    await app.start();
  } catch (err) {
    logger.fatal({ err }, err instanceof Error ? err.message : String(err));
    process.exit(1);
  }

  let stopping = false;
  const shutdown = (signal: NodeJS.Signals): void => {
    if (stopping) return;
    stopping = true;
    logger.warn({ signal }, "received signal, draining");
    app.health.fail("sigterm");
    void (async () => {
      let code = 0;
      try {
        await app.close();
      } catch (err) {
        logger.error({ err }, "error while stopping");
        code = 1;
      }
      // After the listeners have drained, so the last calls' spans are in the flush.
      if (stopTracing !== undefined) await stopTracing();
      if (code === 0) logger.warn("stopped");
      process.exit(code);
    })();
  };
  process.on("SIGTERM", shutdown);
  process.on("SIGINT", shutdown);
  process.on("SIGHUP", () => {
    logger.info("SIGHUP ignored (config reloads on file changes)");
  });
}

/**
 * Starts OpenTelemetry tracing when `TRACING_ENABLED` is true and returns its bounded
 * flush-and-stop. The SDK is imported only then: loading it costs hundreds of ms and tens of
 * MiB that a service without tracing should not pay.
 */
async function startTracingIfEnabled(): Promise<
  (() => Promise<void>) | undefined
> {
  if (!settings.tracingEnabled) {
    logger.info("tracing disabled");
    return undefined;
  }
  const { startTracing } = await import("./telemetry/tracing.js");
  return startTracing({
    protocol: settings.tracingExporterProtocol,
    serviceName: settings.tracingServiceName,
    serviceNamespace: settings.tracingServiceNamespace,
    serviceInstanceId: settings.tracingServiceInstanceId,
    samplingRatio: settings.tracingSamplingRatio,
    logger,
    shutdownTimeoutMs: 5000,
  });
}

/** A worker's IPC channel to its primary (node:cluster), carrying the group's messages. */
function primaryChannel(): WorkerChannel<ToWorker, ToPrimary> {
  return {
    send(message) {
      process.send?.(message);
    },
    onMessage(listener) {
      process.on("message", (message: unknown) => {
        if (isGroupMessage(message)) listener(message as ToWorker);
      });
    },
  };
}

/**
 * The primary of `WORKERS` > 1: forks the workers (they share the listening ports through
 * node:cluster), restarts one that dies unexpectedly, and on SIGTERM/SIGINT forwards the signal
 * and exits 0 once every worker has drained.
 */
function superviseWorkers(count: number): void {
  let stopping = false;
  const relay = new WorkerRelay({
    logger: logger.child({ component: "workers" }),
    overrides: settings.backendType !== "kv",
    auditLogMax: settings.adminAuditLogMax,
  });
  void relay.start();
  const fork = (index: number): void => {
    const worker = cluster.fork({ RATELIMIT_WORKER_INDEX: String(index) });
    const relayWorker = {
      id: worker.id,
      send(message: ToWorker): void {
        // A worker that is gone misses nothing it could still use.
        if (worker.isConnected()) worker.send(message);
      },
    };
    worker.on("message", (message: unknown) => {
      if (isGroupMessage(message))
        relay.receive(relayWorker, message as ToPrimary);
    });
    worker.on("exit", (code, signal) => {
      relay.remove(worker.id);
      if (stopping) return;
      logger.error(
        { worker: index, code, signal },
        "worker exited unexpectedly; restarting it",
      );
      setTimeout(() => {
        fork(index);
      }, 1000).unref();
    });
  };
  for (let i = 0; i < count; i++) fork(i);
  logger.warn({ workers: count }, `started ${count} worker processes`);

  const shutdown = (signal: NodeJS.Signals): void => {
    if (stopping) return;
    stopping = true;
    logger.warn({ signal }, "received signal, stopping workers");
    const workers = Object.values(cluster.workers ?? {});
    let left = workers.length;
    if (left === 0) process.exit(0);
    for (const worker of workers) {
      worker?.once("exit", () => {
        left--;
        if (left === 0) process.exit(0);
      });
      worker?.process.kill(signal);
    }
  };
  process.on("SIGTERM", shutdown);
  process.on("SIGINT", shutdown);
  process.on("SIGHUP", () => {
    logger.info("SIGHUP ignored (config reloads on file changes)");
  });
}
