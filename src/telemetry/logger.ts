import { pino, type DestinationStream, type Logger } from "pino";

/** Log line format (`LOG_FORMAT`). */
export type LogFormat = "text" | "json";

/** Options of {@link createLogger}. */
export interface LoggerOptions {
  /** pino level name (`LOG_LEVEL`, normalised): trace, debug, info, warn, error, fatal. */
  readonly level: string;
  /**
   * `text`: logfmt-style lines `time="…" level=… msg="…" key=value` (the reference's logrus
   * text form); `json`: one object per line with `@timestamp`, `@message`, `level`.
   * @defaultValue "text"
   */
  readonly format?: LogFormat;
  /** Where lines go. @defaultValue standard error, synchronously */
  readonly destination?: { write(line: string): void };
}

// logrus words, so log pipelines built for the reference keep matching.
const levelWords: Readonly<Record<string, string>> = { warn: "warning" };
const levelWord = (label: string): string => levelWords[label] ?? label;

const bareValue = /^[A-Za-z0-9\-._/@^+]+$/;

function logfmtValue(value: unknown): string {
  let text: string;
  if (typeof value === "string") text = value;
  else if (value !== null && typeof value === "object" && "message" in value) {
    text = String(value.message);
  } else if (
    value === undefined ||
    typeof value === "function" ||
    typeof value === "symbol"
  ) {
    text = String(value);
  } else text = JSON.stringify(value);
  return bareValue.test(text) ? text : JSON.stringify(text);
}

/** Turns pino's JSON lines into logfmt-style text lines. */
function textDestination(out: {
  write(line: string): void;
}): DestinationStream {
  return {
    write(line: string): void {
      let record: Record<string, unknown>;
      try {
        record = JSON.parse(line) as Record<string, unknown>;
      } catch {
        out.write(line);
        return;
      }
      const { time, level, msg, ...fields } = record;
      let text = `time=${logfmtValue(time)} level=${logfmtValue(level)} msg=${logfmtValue(msg ?? "")}`;
      for (const [k, v] of Object.entries(fields))
        text += ` ${k}=${logfmtValue(v)}`;
      out.write(text + "\n");
    },
  };
}

/**
 * Creates the root logger. Modules receive `logger.child({ component })`; nothing logs at
 * info per request.
 */
export function createLogger(options: LoggerOptions): Logger {
  const out = options.destination ?? pino.destination({ fd: 2, sync: true });
  if (options.format === "json") {
    return pino(
      {
        level: options.level,
        base: null,
        messageKey: "@message",
        timestamp: () => `,"@timestamp":"${new Date().toISOString()}"`,
        formatters: { level: (label) => ({ level: levelWord(label) }) },
      },
      out,
    );
  }
  return pino(
    {
      level: options.level,
      base: null,
      timestamp: () => `,"time":"${new Date().toISOString()}"`,
      formatters: { level: (label) => ({ level: levelWord(label) }) },
    },
    textDestination(out),
  );
}
