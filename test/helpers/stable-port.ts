// Ports for a store that a test kills and restarts on the same port while a client keeps
// reconnecting: a port inside the kernel's ephemeral range can be taken by the client's own
// connect attempt (a TCP self-connect: source port = destination port when nothing listens),
// and the restarted store then fails with "Address already in use".

import { readFileSync } from "node:fs";
import { createServer } from "node:net";

function ephemeralLow(): number {
  try {
    const [low] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8")
      .trim()
      .split(/\s+/);
    const value = Number(low);
    return Number.isInteger(value) && value > 2000 ? value : 32768;
  } catch {
    // Not Linux: the IANA dynamic range starts at 49152.
    return 49152;
  }
}

function isFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => {
      resolve(false);
    });
    server.listen(port, "127.0.0.1", () => {
      server.close(() => {
        resolve(true);
      });
    });
  });
}

/** A free loopback port below the ephemeral range (so no client connect can take it). */
export async function freeStablePort(): Promise<number> {
  const high = ephemeralLow() - 1;
  const low = Math.max(1024, high - 10_000);
  for (;;) {
    const port = low + Math.floor(Math.random() * (high - low));
    if (await isFree(port)) return port;
  }
}
