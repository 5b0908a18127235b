// Lifecycle under load (200 calls/s): config reloads while calls flow, and SIGTERM to the built
// service process while calls flow. No call the service accepted may fail.

import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { statNames } from "../../src/stats/names.js";
import { pause, runLoad } from "../helpers/load.js";
import { startTestApp } from "../helpers/rls-app.js";
import { freePort, spawnNode } from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";

function config(requestsPerUnit: number): string {
  return `
domain: life
descriptors:
  - key: client
    rate_limit: { unit: minute, requests_per_unit: ${requestsPerUnit} }
`;
}

describe("config reload during load", () => {
  it("answers every call while the config is replaced ten times", async () => {
    const t = await startTestApp({ "life.yaml": config(1_000_000) });
    const loads = t.app.statsManager.store.counter(statNames.configLoadSuccess);
    const loadsBefore = loads.value();
    try {
      const load = await runLoad({
        address: t.addresses.grpc,
        domain: "life",
        entries: [{ key: "client", value: "c1" }],
        scenario: async (phase) => {
          await pause(300);
          phase("reloading");
          for (let i = 0; i < 10; i++) {
            await t.writeConfig("life.yaml", config(1_000_000 + i));
            await pause(250);
          }
          phase("after");
          await pause(300);
        },
      });
      process.stdout.write(
        `\n=== config reload under load ===\n${load.timeline()}\n`,
      );
      expect(load.calls.length).toBeGreaterThan(400);
      expect(load.count()).toEqual({ OK: load.calls.length });
      // The file provider saw the rewrites (some may be coalesced by its debounce).
      expect(loads.value() - loadsBefore).toBeGreaterThanOrEqual(1);
    } finally {
      await t.stop();
    }
  }, 60_000);
});

describe("SIGTERM during load", () => {
  it("finishes every accepted call and exits 0", async () => {
    const root = await mkdtemp(join(tmpdir(), "rls-sigterm-"));
    await mkdir(join(root, "config"));
    await writeFile(join(root, "config", "life.yaml"), config(1_000_000));
    const ports = {
      http: await freePort(),
      grpc: await freePort(),
      debug: await freePort(),
    };
    const service = spawnNode("dist/src/main.js", [], {
      BACKEND_TYPE: "memory",
      HOST: "127.0.0.1",
      PORT: String(ports.http),
      GRPC_HOST: "127.0.0.1",
      GRPC_PORT: String(ports.grpc),
      DEBUG_HOST: "127.0.0.1",
      DEBUG_PORT: String(ports.debug),
      RUNTIME_ROOT: root,
      RUNTIME_SUBDIRECTORY: "",
      RUNTIME_APPDIRECTORY: "config",
      RUNTIME_WATCH_ROOT: "false",
      USE_PUSHSTATS: "false",
      DISABLE_STATS: "true",
      LOG_LEVEL: "warn",
    });
    try {
      await waitFor(
        () => service.output().includes("ratelimit started"),
        "the service to listen",
        20_000,
      );
      const load = await runLoad({
        address: `127.0.0.1:${ports.grpc}`,
        domain: "life",
        entries: [{ key: "client", value: "c1" }],
        scenario: async (phase) => {
          await pause(1000);
          phase("sigterm");
          service.child.kill("SIGTERM");
          await pause(500);
        },
      });
      const messages = [
        ...new Set(
          load.calls.flatMap((c) =>
            c.message !== undefined
              ? [`${c.phase} ${c.answer}: ${c.message}`]
              : [],
          ),
        ),
      ];
      process.stdout.write(
        `\n=== SIGTERM under load ===\n${load.timeline()}\nerrors: ${JSON.stringify(messages)}\n`,
      );
      expect(await service.exited).toBe(0);
      // No call the service accepted failed. A call is answered, or refused before the service
      // processed it: a new connection is refused (UNAVAILABLE), or a stream that reached the
      // server after its GOAWAY (including ones the client sent just before the signal) is
      // reset with REFUSED_STREAM ("not processed, safe to retry", RFC 9113 §8.7), which the
      // Connect client reports as INTERNAL. The memory backend cannot fail, so nothing else.
      const before = load.inPhase("before");
      expect(before.length).toBeGreaterThan(100);
      expect(
        load.calls.filter((c) => c.answer === "OK").length,
      ).toBeGreaterThan(100);
      for (const c of load.calls) {
        if (c.answer === "OK") continue;
        expect([
          "error:unavailable: connect ECONNREFUSED",
          "error:internal: Stream closed with error code NGHTTP2_REFUSED_STREAM",
        ]).toContain(
          `${c.answer}: ${(c.message ?? "").replace(/ [\d.:]+$/, "")}`,
        );
      }
    } finally {
      if (service.child.exitCode === null) service.child.kill("SIGKILL");
      await service.exited;
      await rm(root, { recursive: true, force: true });
    }
  }, 60_000);
});
