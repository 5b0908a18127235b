import { rootCertificates } from "node:tls";
import { describe, expect, it } from "vitest";
import {
  isFailoverReply,
  reconnectDelayMs,
  toKvConnectionOptions,
  toTlsConnectionOptions,
} from "../../../../src/backends/kv/kv-client-options.js";
import { resolveKvInstanceOptions } from "../../../../src/backends/kv/kv-options.js";

describe("toKvConnectionOptions", () => {
  it("maps a tcp instance with KV_TIMEOUT to connect and socket (read) timeouts", () => {
    const mapped = toKvConnectionOptions(
      resolveKvInstanceOptions({
        url: "10.0.0.1:6380",
        socketType: "tcp",
        timeoutMs: 2500,
        auth: "user:pw",
      }),
    );
    expect(mapped.kind).toBe("redis");
    expect(mapped.options).toMatchObject({
      host: "10.0.0.1",
      port: 6380,
      username: "user",
      password: "pw",
      connectTimeout: 2500,
      socketTimeout: 2500,
      protocol: 2,
      keepAlive: 10_000,
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      autoResendUnfulfilledCommands: false,
    });
    expect(mapped.options).not.toHaveProperty("tls");
    expect(mapped.options).not.toHaveProperty("commandTimeout");
  });

  it("switches every timeout off for KV_TIMEOUT=0", () => {
    const { options } = toKvConnectionOptions(
      resolveKvInstanceOptions({ url: "/s.sock", timeoutMs: 0 }),
    );
    expect(options).toMatchObject({ path: "/s.sock", connectTimeout: 0 });
    expect(options).not.toHaveProperty("socketTimeout");
  });

  it("takes the database and credentials of a redis:// URL", () => {
    const { options } = toKvConnectionOptions(
      resolveKvInstanceOptions({ url: "redis://:pw@h:1/5" }),
    );
    expect(options).toMatchObject({
      host: "h",
      port: 1,
      db: 5,
      password: "pw",
    });
    expect(options).not.toHaveProperty("username");
  });

  it("maps sentinel auth only to sentinels, and TLS to sentinels too", () => {
    const { options } = toKvConnectionOptions(
      resolveKvInstanceOptions({
        type: "sentinel",
        url: "mymaster,s1:26379,s2:26380",
        auth: "master-pw",
        sentinelAuth: "sentuser:sent-pw",
        tls: true,
      }),
      { skipHostnameVerification: true },
    );
    expect(options).toMatchObject({
      name: "mymaster",
      sentinels: [
        { host: "s1", port: 26379 },
        { host: "s2", port: 26380 },
      ],
      password: "master-pw",
      sentinelUsername: "sentuser",
      sentinelPassword: "sent-pw",
      enableTLSForSentinelMode: true,
      failoverDetector: true,
    });
    expect(options).toHaveProperty("tls");
    expect(options).toHaveProperty("sentinelTLS");
  });

  it("leaves sentinels unauthenticated without KV_SENTINEL_AUTH", () => {
    const { options } = toKvConnectionOptions(
      resolveKvInstanceOptions({
        type: "sentinel",
        url: "m,s1:1",
        auth: "pw",
      }),
    );
    expect(options).not.toHaveProperty("sentinelPassword");
    expect(options).not.toHaveProperty("sentinelUsername");
  });

  it("gives cluster nodes the connection options", () => {
    const mapped = toKvConnectionOptions(
      resolveKvInstanceOptions({
        type: "cluster",
        url: "a:1,b:2",
        auth: "pw",
        timeoutMs: 1000,
      }),
    );
    if (mapped.kind !== "cluster") throw new Error("expected a cluster");
    expect(mapped.nodes).toEqual([
      { host: "a", port: 1 },
      { host: "b", port: 2 },
    ]);
    expect(mapped.options).toMatchObject({
      enableOfflineQueue: false,
      lazyConnect: true,
      slotsRefreshTimeout: 1000,
      redisOptions: {
        password: "pw",
        socketTimeout: 1000,
        maxRetriesPerRequest: 0,
        protocol: 2,
      },
    });
  });
});

describe("toTlsConnectionOptions", () => {
  it("always verifies the chain and adds the CA to the system roots", () => {
    const options = toTlsConnectionOptions({ ca: "CA-PEM" });
    expect(options.rejectUnauthorized).toBe(true);
    expect(options.ca).toEqual([...rootCertificates, "CA-PEM"]);
    expect(options.checkServerIdentity).toBeUndefined();
    expect(options.cert).toBeUndefined();
  });

  it("sends a client certificate only with both certificate and key", () => {
    expect(toTlsConnectionOptions({ clientCert: "C" }).cert).toBeUndefined();
    expect(
      toTlsConnectionOptions({ clientCert: "C", clientKey: "K" }),
    ).toMatchObject({ cert: "C", key: "K" });
  });

  it("skips only the hostname check when asked", () => {
    const options = toTlsConnectionOptions({ skipHostnameVerification: true });
    expect(options.rejectUnauthorized).toBe(true);
    expect(options.checkServerIdentity?.("h", {} as never)).toBeUndefined();
  });
});

describe("reconnectDelayMs", () => {
  it("doubles from 100 ms and caps at 2 s", () => {
    expect([1, 2, 3, 4, 5, 6, 7, 50].map(reconnectDelayMs)).toEqual([
      100, 200, 400, 800, 1600, 2000, 2000, 2000,
    ]);
  });
});

describe("isFailoverReply", () => {
  const reply = (message: string): Error => new Error(message);

  it("recognises a replica's, a loading node's and a primary-less replica's refusals", () => {
    for (const message of [
      "READONLY You can't write against a read only replica.",
      "READONLY You can't write against a read only replica. script: 9be9283860375dc0a789b44c11a2bb1dce6e480f, on @user_script:1.",
      "ERR Error running script (call to f_9be92838): @user_script:1: @user_script: 1: -READONLY You can't write against a read only slave.",
      "LOADING Redis is loading the dataset in memory",
      "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
    ])
      expect(isFailoverReply(reply(message)), message).toBe(true);
  });

  it("leaves every other error to the command", () => {
    for (const message of [
      "NOSCRIPT No matching script. Please use EVAL.",
      "ERR value is not an integer or out of range",
      "WRONGTYPE Operation against a key holding the wrong kind of value",
      "MOVED 3999 127.0.0.1:6381",
      "OOM command not allowed when used memory > 'maxmemory'.",
      "Connection is closed.",
      "ERR unknown command 'READONLY'",
    ])
      expect(isFailoverReply(reply(message)), message).toBe(false);
  });

  it("is the reconnectOnError of single, sentinel and cluster node connections", () => {
    for (const instance of [
      resolveKvInstanceOptions({ url: "h:1" }),
      resolveKvInstanceOptions({ url: "/s.sock" }),
      resolveKvInstanceOptions({ type: "sentinel", url: "m,s1:26379" }),
    ])
      expect(toKvConnectionOptions(instance).options).toMatchObject({
        reconnectOnError: isFailoverReply,
      });
    const cluster = toKvConnectionOptions(
      resolveKvInstanceOptions({ type: "cluster", url: "a:1,b:2" }),
    );
    if (cluster.kind !== "cluster") throw new Error("expected a cluster");
    expect(cluster.options.redisOptions).toMatchObject({
      reconnectOnError: isFailoverReply,
    });
  });
});
