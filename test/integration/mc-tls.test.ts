import { create } from "@bufbuild/protobuf";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { silentLogger } from "../helpers/silent-logger.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { McTlsOptions } from "../../src/backends/mc/mc-options.js";
import { HealthChecker } from "../../src/health/health.js";
import { createDecider } from "../../src/limiter/decide.js";
import {
  RateLimitDescriptorSchema,
  RateLimitResponse_Code as Code,
} from "../../src/proto.js";
import { createStatsManager } from "../../src/stats/stats-manager.js";
import { FakeClock } from "../helpers/fake-clock.js";
import {
  startMemcached,
  writeTestCertificates,
  type MemcachedServer,
} from "../helpers/memcached-server.js";
import { testRateLimit } from "../helpers/rate-limit.js";
import { mcLimiter } from "../helpers/limiters.js";
import { limitRequest } from "../helpers/limit-request.js";

// Debian's memcached 1.6.18 is built with TLS (`memcached -h` lists -Z / ssl_* options).
describe("McCounterBackend over TLS", () => {
  let dir: string | undefined;
  let server: MemcachedServer | undefined;
  let files: { ca: Buffer; cert: Buffer; key: Buffer };
  const clock = new FakeClock(Math.floor(Date.now() / 1000));

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "rls-mc-tls-"));
    const paths = writeTestCertificates(dir);
    server = await startMemcached({
      tls: { cert: paths.serverCert, key: paths.serverKey, ca: paths.ca },
    });
    files = {
      ca: await readFile(paths.ca),
      cert: await readFile(paths.clientCert),
      key: await readFile(paths.clientKey),
    };
  });

  afterAll(async () => {
    await server?.stop();
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  async function decideTwice(tls: McTlsOptions) {
    const health = new HealthChecker([]);
    const cache = mcLimiter({
      decider: createDecider({ clock }),
      clock,
      logger: silentLogger(),
      hostPorts: [server!.address],
      health,
      tls,
    });
    try {
      await cache.start();
      const limit = testRateLimit(createStatsManager(), "tls.k", 1);
      const d = create(RateLimitDescriptorSchema, {
        entries: [{ key: "k", value: JSON.stringify(tls).length.toString() }],
      });
      const codes: Code[] = [];
      for (let i = 0; i < 2; i++) {
        const [status] = await cache.doLimit(
          limitRequest("tls", [d], [limit], [1]),
        );
        await cache.flush();
        codes.push(status!.code);
      }
      return {
        codes,
        healthy: health.isHealthy(),
        // The decision is the increment: its failures are the node's errors.
        errors: cache.backend.stats.incrementError.value(),
      };
    } finally {
      await cache.close();
    }
  }

  it("counts over TLS with a client certificate, verifying the chain but not the host name", async () => {
    const result = await decideTwice({
      ...files,
      skipHostnameVerification: true,
    });
    expect(result).toEqual({
      codes: [Code.OK, Code.OVER_LIMIT],
      healthy: true,
      errors: 0,
    });
  });

  it("fails open and reports unhealthy when the server's name does not match", async () => {
    // The certificate names memcached.test; we connect to 127.0.0.1.
    const result = await decideTwice({ ...files });
    expect(result).toEqual({
      codes: [Code.OK, Code.OK],
      healthy: false,
      errors: 2,
    });
  });

  it("fails open when no client certificate is presented", async () => {
    const result = await decideTwice({
      ca: files.ca,
      skipHostnameVerification: true,
    });
    expect(result.codes).toEqual([Code.OK, Code.OK]);
    expect(result.healthy).toBe(false);
  });
});
