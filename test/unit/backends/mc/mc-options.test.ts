import { rootCertificates } from "node:tls";
import { silentLogger } from "../../../helpers/silent-logger.js";
import { describe, expect, it } from "vitest";
import {
  nodesFromSrv,
  parseNodeAddress,
  resolveMcBackendOptions,
  type McBackendOptions,
} from "../../../../src/backends/mc/mc-options.js";
import { FakeClock } from "../../../helpers/fake-clock.js";

const clock = new FakeClock(0);
const base: McBackendOptions = {
  clock,
  logger: silentLogger(),
};

describe("parseNodeAddress", () => {
  it.each([
    ["127.0.0.1:11211", "127.0.0.1", 11211],
    ["mc-0.mc.svc.cluster.local:11211", "mc-0.mc.svc.cluster.local", 11211],
    ["[::1]:11211", "::1", 11211],
    ["localhost:1", "localhost", 1],
  ])("parses %j", (text, host, port) => {
    expect(parseNodeAddress(text)).toEqual({ address: text, host, port });
  });

  it.each([
    "localhost",
    ":11211",
    "host:",
    "host:0",
    "host:65536",
    "host:1x",
    "::1:11211",
  ])("rejects %j naming it", (text) => {
    expect(() => parseNodeAddress(text)).toThrow(
      new RangeError(
        `${JSON.stringify(text)}: expected host:port (or [ipv6]:port) with a port from 1 to 65535`,
      ),
    );
  });
});

describe("nodesFromSrv", () => {
  it("sorts target.:port strings bytewise, ignoring priority and weight, with Go's trailing dot", () => {
    const nodes = nodesFromSrv([
      { name: "mc-9.example", port: 11211, priority: 0, weight: 0 },
      { name: "mc-10.example.", port: 11211, priority: 5, weight: 1 },
      { name: "mc-1.example", port: 2, priority: 9, weight: 9 },
    ]);
    expect(nodes.map((n) => n.address)).toEqual([
      "mc-1.example.:2",
      "mc-10.example.:11211",
      "mc-9.example.:11211",
    ]);
    expect(nodes[0]).toEqual({
      address: "mc-1.example.:2",
      host: "mc-1.example",
      port: 2,
    });
  });

  it("orders a name before its own subdomains, as Go does with the dot kept", () => {
    // Without the trailing dot "a:1" would sort after "a.b:1" ('.' < ':').
    const nodes = nodesFromSrv([
      { name: "a.b", port: 1, priority: 0, weight: 0 },
      { name: "a", port: 1, priority: 0, weight: 0 },
    ]);
    expect(nodes.map((n) => n.address)).toEqual(["a.:1", "a.b.:1"]);
  });
});

describe("resolveMcBackendOptions", () => {
  it("fills in the defaults", () => {
    const resolved = resolveMcBackendOptions({
      ...base,
      hostPorts: ["h:1", "h:2"],
    });
    expect(resolved).toMatchObject({
      nodes: [
        { address: "h:1", host: "h", port: 1 },
        { address: "h:2", host: "h", port: 2 },
      ],
      srv: "",
      srvRefreshMs: 0,
      connectionsPerNode: 2,
      tls: undefined,
      timeoutMs: 500,
      connectTimeoutMs: 1000,
      healthCheckIntervalMs: 5000,
      health: undefined,
    });
  });

  it("keeps at least one connection per node", () => {
    for (const [maxIdleConns, connections] of [
      [0, 1],
      [1, 1],
      [4, 4],
    ] as const) {
      expect(
        resolveMcBackendOptions({ ...base, hostPorts: ["h:1"], maxIdleConns })
          .connectionsPerNode,
      ).toBe(connections);
    }
  });

  it("needs exactly one node source and a well-formed SRV name", () => {
    expect(() => resolveMcBackendOptions(base)).toThrow(/both empty/);
    expect(() =>
      resolveMcBackendOptions({
        ...base,
        hostPorts: ["h:1"],
        srv: "_mc._tcp.x",
      }),
    ).toThrow(/both set/);
    expect(() =>
      resolveMcBackendOptions({ ...base, srv: "mc.example" }),
    ).toThrow(/not an SRV record name/);
    expect(
      resolveMcBackendOptions({ ...base, srv: "_mc._tcp.example" }).nodes,
    ).toEqual([]);
  });

  it("rejects negative durations and counts", () => {
    expect(() =>
      resolveMcBackendOptions({ ...base, srv: "_mc._tcp.x", srvRefreshMs: -1 }),
    ).toThrow(/srvRefreshMs/);
    expect(() =>
      resolveMcBackendOptions({ ...base, hostPorts: ["h:1"], timeoutMs: 0 }),
    ).toThrow(/timeoutMs/);
  });

  it("adds the CA to the bundled roots and can skip only the host name check", () => {
    const resolved = resolveMcBackendOptions({
      ...base,
      hostPorts: ["h:1"],
      tls: {
        ca: "CA-PEM",
        cert: "CERT",
        key: "KEY",
        skipHostnameVerification: true,
      },
    });
    const tls = resolved.tls!;
    expect(tls.ca).toEqual([...rootCertificates, "CA-PEM"]);
    expect(tls.cert).toBe("CERT");
    expect(tls.key).toBe("KEY");
    expect(tls.rejectUnauthorized).toBeUndefined();
    expect(tls.checkServerIdentity?.("h", {} as never)).toBeUndefined();
    const strict = resolveMcBackendOptions({
      ...base,
      hostPorts: ["h:1"],
      tls: {},
    }).tls!;
    expect(strict).toEqual({});
  });

  it("rejects a client certificate without its key", () => {
    expect(() =>
      resolveMcBackendOptions({
        ...base,
        hostPorts: ["h:1"],
        tls: { cert: "CERT" },
      }),
    ).toThrow(/needs its key/);
  });
});
