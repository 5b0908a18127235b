// A real Envoy for end-to-end tests, running the README's example config
// (examples/envoy/envoy.yaml) with loopback ports, in front of an upstream served from the
// test process. Envoy is installed by scripts/ensure-envoy.sh (a prerequisite of `make test`).

import { mkdtempSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  envoyConfig,
  startEnvoy,
  type Envoy,
  type HostPort,
} from "../../bench/envoy.js";
import { freePort } from "./spawn-service.js";

/** An HTTP/1.1 upstream that answers every request with 200 `upstream ok` and counts them. */
export interface Upstream {
  readonly port: number;
  /** Requests that reached the upstream so far. */
  requests(): number;
  stop(): Promise<void>;
}

/** Starts an {@link Upstream} on 127.0.0.1 and a free port. */
export async function startUpstream(): Promise<Upstream> {
  let requests = 0;
  const server: Server = createServer((req, res) => {
    requests += 1;
    req.resume();
    res.writeHead(200, { "content-type": "text/plain" });
    res.end("upstream ok");
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  const port =
    typeof address === "object" && address !== null ? address.port : 0;
  return {
    port,
    requests: () => requests,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => {
          resolve();
        });
      }),
  };
}

/** An Envoy started by {@link startExampleEnvoy}, with its temporary directory. */
export interface TestEnvoy extends Envoy {
  /** Stops Envoy and removes its directory. */
  stop(): Promise<void>;
}

/**
 * Starts Envoy with examples/envoy/envoy.yaml, its listener and admin on free loopback ports,
 * its `ratelimit` cluster pointed at `ratelimit` and its `backend` cluster at `backend`.
 *
 * @param timeout - replaces the filter's `timeout: 0.02s`; tests pass a generous value so that
 *   a loaded test machine cannot turn a slow decision into a fail-open (which the assertions
 *   would read as a wrong decision).
 */
export async function startExampleEnvoy(
  ratelimit: HostPort,
  backend: HostPort,
  timeout?: string,
): Promise<TestEnvoy> {
  const dir = mkdtempSync(join(tmpdir(), "rls-envoy-"));
  const adminPort = await freePort();
  const listenerPort = await freePort();
  try {
    const envoy = await startEnvoy(
      dir,
      envoyConfig({
        adminPort,
        listenerPort,
        ratelimit,
        backend,
        ...(timeout !== undefined ? { timeout } : {}),
      }),
      adminPort,
      listenerPort,
    );
    return {
      ...envoy,
      async stop() {
        await envoy.stop();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}
