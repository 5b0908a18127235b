import { readFileSync } from "node:fs";
import { create } from "@bufbuild/protobuf";
import { Redis } from "ioredis";
import { silentLogger } from "../helpers/silent-logger.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type {
  KvInstanceOptions,
  KvTlsOptions,
} from "../../src/backends/kv/kv-options.js";
import { BackendError } from "../../src/limiter/backend-error.js";
import { createDecider } from "../../src/limiter/decide.js";
import { RateLimitDescriptorSchema } from "../../src/proto.js";
import { createStatsManager } from "../../src/stats/stats-manager.js";
import { FakeClock } from "../helpers/fake-clock.js";
import { testRateLimit } from "../helpers/rate-limit.js";
import {
  makeTestCertificates,
  startRedisServer,
  stopAllRedisServers,
  track,
  type RedisServer,
  type TestCertificates,
} from "../helpers/redis-server.js";
import { kvLimiter } from "../helpers/limiters.js";
import { limitRequest } from "../helpers/limit-request.js";

const nowSeconds = 1_700_000_040;
const windowStart = nowSeconds - (nowSeconds % 60);
const stats = createStatsManager();
const limit = testRateLimit(stats, "d.k", 10);
const descriptor = create(RateLimitDescriptorSchema, {
  entries: [{ key: "k", value: "v" }],
});

let withPassword: RedisServer;
let withAcl: RedisServer;
let tlsServer: RedisServer;
let otherHostTls: RedisServer;
let certs: TestCertificates;

beforeAll(async () => {
  certs = makeTestCertificates();
  [withPassword, withAcl, tlsServer, otherHostTls] = await Promise.all([
    startRedisServer({
      args: ["--requirepass", "s3cret"],
      password: "s3cret",
    }),
    startRedisServer({
      // Arguments after an option are joined into its config line.
      args: [
        "--user",
        "default",
        "off",
        "--user",
        "rls",
        "on",
        ">rlspass",
        "~*",
        "&*",
        "+@all",
      ],
    }),
    startRedisServer({
      tls: {
        certFile: certs.serverCertFile,
        keyFile: certs.serverKeyFile,
        caFile: certs.caFile,
        authClients: "yes",
      },
    }),
    startRedisServer({
      tls: {
        certFile: certs.otherHostCertFile,
        keyFile: certs.otherHostKeyFile,
        caFile: certs.caFile,
        authClients: "no",
      },
    }),
  ]).then((servers) => servers.map(track));
});
afterAll(async () => {
  await stopAllRedisServers();
  certs.remove();
});

async function decide(
  main: KvInstanceOptions,
  tls?: KvTlsOptions,
): Promise<number> {
  const cache = kvLimiter({
    main,
    ...(tls !== undefined ? { tls } : {}),
    decider: createDecider({ clock: new FakeClock(nowSeconds) }),
    logger: silentLogger(),
    startupInitialIntervalMs: 20,
    startupMaxElapsedTimeMs: 300,
  });
  try {
    await cache.start();
    const [status] = await cache.doLimit(
      limitRequest("d", [descriptor], [limit], [1]),
    );
    return status!.limitRemaining;
  } finally {
    await cache.close();
  }
}

async function startError(
  main: KvInstanceOptions,
  tls?: KvTlsOptions,
): Promise<Error> {
  const err = await decide(main, tls).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(BackendError);
  return err as Error;
}

const tcp = (url: string, extra: Partial<KvInstanceOptions> = {}) =>
  ({ type: "single", socketType: "tcp", url, ...extra }) as const;

describe("KvCounterBackend authentication", () => {
  it("authenticates with KV_AUTH=<password> (requirepass)", async () => {
    expect(await decide(tcp(withPassword.address, { auth: "s3cret" }))).toBe(9);
  });

  it("fails start-up with a wrong password, without revealing it", async () => {
    const err = await startError(
      tcp(withPassword.address, { auth: "wrong-pw" }),
    );
    expect(err.message).not.toContain("wrong-pw");
    expect(String(err.cause)).not.toContain("wrong-pw");
  });

  it("authenticates an ACL user with KV_AUTH=<user>:<password>", async () => {
    expect(await decide(tcp(withAcl.address, { auth: "rls:rlspass" }))).toBe(9);
  });

  it("takes user, password and database from a redis:// URL", async () => {
    expect(await decide(tcp(`redis://rls:rlspass@${withAcl.address}/3`))).toBe(
      9,
    );
    const admin = new Redis({
      port: withAcl.port,
      host: "127.0.0.1",
      username: "rls",
      password: "rlspass",
      db: 3,
    });
    try {
      expect(await admin.get(`d_k_v_${windowStart}`)).toBe("1");
    } finally {
      admin.disconnect();
    }
  });
});

describe("KvCounterBackend over TLS", () => {
  it("connects with a client certificate and the CA", async () => {
    const tls: KvTlsOptions = {
      ca: readFileSync(certs.caFile),
      clientCert: readFileSync(certs.clientCertFile),
      clientKey: readFileSync(certs.clientKeyFile),
    };
    expect(
      await decide(tcp(`127.0.0.1:${tlsServer.tlsPort}`, { tls: true }), tls),
    ).toBe(9);
    const admin = tlsServer.client();
    try {
      expect(await admin.get(`d_k_v_${windowStart}`)).toBe("1");
    } finally {
      admin.disconnect();
    }
  });

  it("is refused without the client certificate the server requires", async () => {
    await startError(tcp(`127.0.0.1:${tlsServer.tlsPort}`, { tls: true }), {
      ca: readFileSync(certs.caFile),
    });
  });

  it("rejects a certificate for another host unless hostname verification is skipped", async () => {
    const url = `127.0.0.1:${otherHostTls.tlsPort}`;
    const ca = readFileSync(certs.caFile);
    const err = await startError(tcp(url, { tls: true }), { ca });
    expect(err.message).toMatch(
      /IP: 127\.0\.0\.1 is not in the cert's list|altnames/i,
    );
    expect(
      await decide(tcp(url, { tls: true }), {
        ca,
        skipHostnameVerification: true,
      }),
    ).toBe(9);
  });

  it("still verifies the chain when hostname verification is skipped", async () => {
    const err = await startError(
      tcp(`127.0.0.1:${otherHostTls.tlsPort}`, { tls: true }),
      { skipHostnameVerification: true },
    );
    expect(err.message).toMatch(/self[- ]signed|unable to (get|verify)/i);
  });
});
