import { createApp, type App } from "./app.js";
import { SettingsError } from "./settings/settings-error.js";
import { settingsMarkdown } from "./settings/settings-markdown.js";
import { settingsTable } from "./settings/settings-table.js";
import { loadSettings } from "./settings/settings.js";
import { createLogger } from "./telemetry/logger.js";

// Process entry point: the one place that reads process.env and calls process.exit.

function usage(): string {
  const width = Math.max(...settingsTable.map((r) => r.name.length));
  const lines = [
    "usage: ratelimit [--help]",
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

const args = process.argv.slice(2);
if (args.includes("--help-markdown")) {
  process.stdout.write(settingsMarkdown());
  process.exit(0);
}
if (args.includes("--help") || args.includes("-h") || args.includes("-help")) {
  process.stdout.write(usage());
  process.exit(0);
}

let loaded;
try {
  loaded = loadSettings(process.env);
} catch (err) {
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

let app: App;
try {
  app = createApp(settings, { logger });
  await app.start();
} catch (err) {
  logger.fatal({ err }, err instanceof Error ? err.message : String(err));
  process.exit(1);
}

let stopping = false;
function shutdown(signal: NodeJS.Signals): void {
  if (stopping) return;
  stopping = true;
  logger.warn({ signal }, "received signal, draining");
  app.health.fail("sigterm");
  app.close().then(
    () => {
      logger.warn("stopped");
      process.exit(0);
    },
    (err: unknown) => {
      logger.error({ err }, "error while stopping");
      process.exit(1);
    },
  );
}
process.on("SIGTERM", shutdown);
process.on("SIGINT", shutdown);
process.on("SIGHUP", () => {
  logger.info("SIGHUP ignored (config reloads on file changes)");
});
