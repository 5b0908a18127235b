// Logging: level and line format.

import { custom, lowerCase, oneOf, upperCase } from "./codecs.js";
import { setting, settingsGroup } from "./define.js";

/** pino level names; `LOG_LEVEL` takes the reference's level words and maps them here. */
export type LogLevel = "trace" | "debug" | "info" | "warn" | "error" | "fatal";
/** Log line format (`LOG_FORMAT`). */
export type LogFormat = "text" | "json";

const logLevel = oneOf<LogLevel>(
  new Map<string, LogLevel>([
    ["panic", "fatal"],
    ["fatal", "fatal"],
    ["error", "error"],
    ["warn", "warn"],
    ["warning", "warn"],
    ["info", "info"],
    ["debug", "debug"],
    ["trace", "trace"],
  ]),
  "one of panic, fatal, error, warn, warning, info, debug, trace (any case)",
  { fold: lowerCase, format: upperCase },
);
const logFormat = custom<LogFormat>(
  (value) => (value.toLowerCase() === "json" ? "json" : "text"),
  String,
);

export const logging = settingsGroup("logging", {
  /**
   * Log level (any case of panic, fatal, error, warn, warning, info, debug, trace;
   * panic maps to fatal, warning to warn).
   */
  logLevel: setting({
    env: "LOG_LEVEL",
    codec: logLevel,
    default: "warn",
    meaning:
      "panic, fatal, error, warn, warning, info, debug or trace (any case).",
  }),
  /** Log format: `json` (any case) or text for anything else. */
  logFormat: setting({
    env: "LOG_FORMAT",
    codec: logFormat,
    default: "text",
    meaning: "json for JSON lines; anything else gives text lines.",
  }),
});
