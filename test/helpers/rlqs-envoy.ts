// Real Envoys running examples/envoy/rlqs.yaml (the RLQS filter, bucket {tenant: <x-tenant>})
// with loopback ports, for the RLQS end-to-end tests. Each Envoy gets its own temporary
// directory and a distinct --base-id (bench/envoy.ts), so several run side by side.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  envoyConfig,
  startEnvoy,
  type Envoy,
  type HostPort,
} from "../../bench/envoy.js";
import { freePort, repoRoot } from "./spawn-service.js";

/** The RLQS example config run by the tests as is (only addresses and ports change). */
export const rlqsExamplePath = join(repoRoot, "examples", "envoy", "rlqs.yaml");

/** An Envoy started by {@link startRlqsEnvoy}. */
export interface RlqsEnvoy extends Envoy {
  /** Stops Envoy and removes its directory. */
  stop(): Promise<void>;
}

/**
 * Starts Envoy with examples/envoy/rlqs.yaml, its listener and admin on free loopback ports,
 * its `rlqs_server` cluster pointed at `rlqs` and its `backend` cluster at `backend`.
 */
export async function startRlqsEnvoy(
  rlqs: HostPort,
  backend: HostPort,
): Promise<RlqsEnvoy> {
  const dir = mkdtempSync(join(tmpdir(), "rls-envoy-rlqs-"));
  try {
    const adminPort = await freePort();
    const listenerPort = await freePort();
    const envoy = await startEnvoy(
      dir,
      envoyConfig({
        example: rlqsExamplePath,
        adminPort,
        listenerPort,
        ratelimit: rlqs,
        backend,
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
