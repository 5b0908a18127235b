// An in-flight (concurrency) limit end to end through a real Envoy (examples/envoy/inflight.yaml):
// Envoy charges +1 when a request starts and sends the refund (`is_negative_hits`) when its
// stream ends, 429s included. With a limit of 3 in flight and an upstream that holds every
// request until the test releases it, exactly 3 of 6 concurrent requests pass, the others get
// 429, and once they finish 3 more pass, round after round (no slot leaks).

import { mkdtempSync, rmSync } from "node:fs";
import {
  createServer,
  type IncomingMessage,
  type ServerResponse,
} from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { envoyConfig, startEnvoy, type Envoy } from "../../bench/envoy.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { freePort, repoRoot } from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";

const capacity = 3;
const config = `
domain: inflight
descriptors:
  - key: route
    value: slow
    rate_limit: { unit: hour, requests_per_unit: ${capacity} }
`;

/** An upstream that holds each request until {@link release} answers every held one. */
const held: ServerResponse[] = [];
const upstream = createServer((req: IncomingMessage, res: ServerResponse) => {
  req.resume();
  held.push(res);
});
function release(): void {
  for (const res of held.splice(0)) {
    res.writeHead(200, { "content-type": "text/plain" });
    res.end("done");
  }
}

let app: TestApp;
let envoy: Envoy;
let dir: string;

/** Rate-limit calls Envoy has finished (starts and stream ends). */
async function rlsCalls(): Promise<number> {
  const counters = await envoy.counters(
    "cluster.ratelimit.upstream_rq_completed",
  );
  return counters["cluster.ratelimit.upstream_rq_completed"] ?? 0;
}

beforeAll(async () => {
  // Away from an hour boundary: the whole test shares one window of the rule.
  const left = 3600 - (Math.floor(Date.now() / 1000) % 3600);
  if (left <= 30) await new Promise((r) => setTimeout(r, (left + 1) * 1000));
  app = await startTestApp({ "inflight.yaml": config });
  await new Promise<void>((resolve) =>
    upstream.listen(0, "127.0.0.1", resolve),
  );
  const address = upstream.address();
  const upstreamPort =
    typeof address === "object" && address !== null ? address.port : 0;
  dir = mkdtempSync(join(tmpdir(), "rls-envoy-inflight-"));
  const adminPort = await freePort();
  const listenerPort = await freePort();
  envoy = await startEnvoy(
    dir,
    envoyConfig({
      example: join(repoRoot, "examples", "envoy", "inflight.yaml"),
      adminPort,
      listenerPort,
      ratelimit: {
        host: "127.0.0.1",
        port: Number(app.addresses.grpc.split(":").pop()),
      },
      backend: { host: "127.0.0.1", port: upstreamPort },
      timeout: "5s",
    }),
    adminPort,
    listenerPort,
  );
}, 60_000);

afterAll(async () => {
  release();
  await envoy.stop();
  rmSync(dir, { recursive: true, force: true });
  upstream.closeAllConnections();
  await new Promise<void>((resolve) => {
    upstream.close(() => {
      resolve();
    });
  });
  await app.stop();
});

describe("in-flight limit through Envoy 1.40 (apply_on_stream_done + is_negative_hits)", () => {
  it(`passes exactly ${capacity} of 6 concurrent requests, round after round`, async () => {
    const rounds: string[] = [];
    for (let round = 0; round < 4; round++) {
      const callsBefore = await rlsCalls();
      const requests = Array.from({ length: 6 }, () =>
        fetch(`${envoy.url}/work`).then(async (res) => {
          await res.text();
          return res.status;
        }),
      );
      // The refused ones are answered at once; the admitted ones wait in the upstream.
      await waitFor(
        () => (held.length === capacity ? true : undefined),
        `${capacity} requests held by the upstream (round ${round})`,
        10_000,
      );
      release();
      const statuses = await Promise.all(requests);
      rounds.push(statuses.join(","));
      expect(statuses.filter((s) => s === 200)).toHaveLength(capacity);
      expect(statuses.filter((s) => s === 429)).toHaveLength(6 - capacity);
      // Every stream's end sent its refund (a start and an end per request).
      await waitFor(
        async () => ((await rlsCalls()) - callsBefore >= 12 ? true : undefined),
        `the refunds of round ${round}`,
        10_000,
      );
    }
    process.stdout.write(
      `envoy in-flight rounds (status per request): ${rounds.join(" | ")}\n`,
    );
  }, 60_000);
});
