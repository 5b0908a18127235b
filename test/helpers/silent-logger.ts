// The one logger tests hand to code that wants a pino Logger but whose output no test reads.

import { pino, type Logger } from "pino";

/** Returns a pino logger at level `silent`: every call is a no-op, nothing reaches stdout. */
export function silentLogger(): Logger {
  return pino({ level: "silent" });
}
