import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { parse } from "yaml";
import { envoyConfig, envoyExamplePath } from "../../../bench/envoy.js";
import { percentilesOfNs } from "../../../bench/load-tools.js";

interface SocketAddress {
  socket_address: { address: string; port_value: number };
}
interface Parsed {
  admin: { address: SocketAddress };
  static_resources: {
    listeners: { address: SocketAddress }[];
    clusters: {
      name: string;
      load_assignment: {
        endpoints: {
          lb_endpoints: { endpoint: { address: SocketAddress } }[];
        }[];
      };
    }[];
  };
}

const options = {
  adminPort: 40001,
  listenerPort: 40002,
  ratelimit: { host: "127.0.0.1", port: 40003 },
  backend: { host: "127.0.0.1", port: 40004 },
};

function endpoint(parsed: Parsed, cluster: string): SocketAddress {
  const found = parsed.static_resources.clusters.find(
    (c) => c.name === cluster,
  );
  return found!.load_assignment.endpoints[0]!.lb_endpoints[0]!.endpoint.address;
}

describe("envoyConfig (examples/envoy/envoy.yaml with loopback ports)", () => {
  it("replaces the admin, listener and both cluster addresses", () => {
    const parsed = parse(envoyConfig(options)) as Parsed;
    expect(parsed.admin.address.socket_address).toEqual({
      address: "127.0.0.1",
      port_value: 40001,
    });
    expect(
      parsed.static_resources.listeners[0]!.address.socket_address,
    ).toEqual({
      address: "127.0.0.1",
      port_value: 40002,
    });
    expect(endpoint(parsed, "ratelimit").socket_address).toEqual({
      address: "127.0.0.1",
      port_value: 40003,
    });
    expect(endpoint(parsed, "backend").socket_address).toEqual({
      address: "127.0.0.1",
      port_value: 40004,
    });
  });

  it("changes nothing else (the example's own lines stay, timeout included)", () => {
    const example = readFileSync(envoyExamplePath, "utf8").split("\n");
    const config = envoyConfig(options).split("\n");
    expect(config).toHaveLength(example.length);
    const changed = config.filter((line, i) => line !== example[i]);
    expect(changed).toHaveLength(4);
    expect(config).toContain("                      timeout: 0.02s");
  });

  it("replaces the filter's timeout only when asked", () => {
    const config = envoyConfig({ ...options, timeout: "5s" });
    expect(config).toContain("timeout: 5s");
    expect(config).not.toContain("timeout: 0.02s");
  });
});

describe("percentilesOfNs", () => {
  it("takes the nearest rank, in milliseconds", () => {
    const ns = Array.from({ length: 1000 }, (_, i) => (1000 - i) * 1e6);
    expect(percentilesOfNs(ns)).toEqual({
      p50Ms: 500,
      p90Ms: 900,
      p99Ms: 990,
      p999Ms: 999,
    });
  });

  it("answers 0 for no samples", () => {
    expect(percentilesOfNs([])).toEqual({
      p50Ms: 0,
      p90Ms: 0,
      p99Ms: 0,
      p999Ms: 0,
    });
  });
});
