import { createRouterTransport } from "@connectrpc/connect";
import { silentLogger } from "../../../helpers/silent-logger.js";
import { afterEach, describe, expect, it } from "vitest";
import {
  AdsStream,
  toAdsBaseUrl,
  type AdsConnection,
  type AdsVerdict,
  type ScheduleTimer,
} from "../../../../src/provider/xds/ads-stream.js";
import type { DiscoveryResponse } from "../../../../src/proto.js";
import { createExponentialBackoff } from "../../../../src/util/backoff.js";
import {
  createAdsManagement,
  rateLimitConfigTypeUrl,
  type AdsManagement,
  type RecordedRequest,
} from "../../../helpers/ads-server.js";

describe("toAdsBaseUrl", () => {
  it.each([
    ["localhost:18000", false, "http://localhost:18000"],
    ["localhost:18000", true, "https://localhost:18000"],
    ["dns:///xds.example:443", true, "https://xds.example"],
    ["passthrough:///10.0.0.1:18000", false, "http://10.0.0.1:18000"],
    ["[::1]:18000", false, "http://[::1]:18000"],
    ["xds.example", true, "https://xds.example"],
    ["xds.example", false, "http://xds.example:443"],
  ])("maps %s (tls %s) to %s", (target, tls, expected) => {
    expect(toAdsBaseUrl(target, tls)).toBe(expected);
  });

  it.each(["", "http://x:1", "::1:18000", "host:port", "a b:1", "user@h:1"])(
    "rejects %j",
    (target) => {
      expect(() => toAdsBaseUrl(target, false)).toThrow(
        /invalid xDS server address/,
      );
    },
  );
});

interface Harness {
  readonly management: AdsManagement;
  readonly stream: AdsStream;
  /** Backoff waits asked for, in ms. */
  readonly delays: number[];
  /** Responses seen by onResponse. */
  readonly responses: DiscoveryResponse[];
  /** Next verdicts (default ACK). */
  readonly verdicts: (AdsVerdict | Error)[];
  /** Number of connection attempts. */
  connects: number;
  /** The next this many connection attempts fail. */
  failConnects: number;
}

describe("AdsStream", () => {
  let harness: Harness | undefined;
  afterEach(async () => {
    await harness?.stream.close();
    harness = undefined;
  });

  /** A stream against an in-memory management server; backoff 10 → 20 → 40 ms, timers immediate. */
  function start(schedule?: ScheduleTimer): Harness {
    const management = createAdsManagement();
    const h: Harness = {
      management,
      delays: [],
      responses: [],
      verdicts: [],
      connects: 0,
      failConnects: 0,
      stream: undefined as unknown as AdsStream,
    };
    const connect = (): Promise<AdsConnection> => {
      h.connects++;
      const fail = h.failConnects > 0;
      if (fail) h.failConnects--;
      return Promise.resolve({
        transport: createRouterTransport(management.routes),
        connect: () =>
          fail ? Promise.reject(new Error("refused")) : Promise.resolve(),
        close: () => undefined,
      });
    };
    const stream = new AdsStream({
      serverUrl: "in-memory",
      nodeId: "unit-node",
      nodeMetadata: { cluster: "unit" },
      typeUrl: rateLimitConfigTypeUrl,
      headers: { "x-token": "secret" },
      connect,
      backoff: createExponentialBackoff({
        initialIntervalMs: 10,
        maxIntervalMs: 40,
        random: () => 0.5,
      }),
      onResponse: (response) => {
        h.responses.push(response);
        const verdict = h.verdicts.shift() ?? { ok: true };
        if (verdict instanceof Error) throw verdict;
        return verdict;
      },
      logger: silentLogger(),
      schedule:
        schedule ??
        ((callback, delayMs) => {
          h.delays.push(delayMs);
          const timer = setImmediate(callback);
          return () => {
            clearImmediate(timer);
          };
        }),
    });
    Object.assign(h, { stream });
    harness = h;
    stream.start();
    return h;
  }

  const byNonce = (nonce: string) => (r: RecordedRequest) =>
    r.request.responseNonce === nonce;

  it("opens with node, type URL, headers and no version, then ACKs each response", async () => {
    const h = start();
    const first = await h.management.waitForRequest(() => true, "first");
    expect(first.request).toMatchObject({
      versionInfo: "",
      responseNonce: "",
      typeUrl: rateLimitConfigTypeUrl,
      resourceNames: [],
      node: { id: "unit-node", metadata: { cluster: "unit" } },
    });
    expect(first.request.errorDetail).toBeUndefined();
    expect(first.headers.get("x-token")).toBe("secret");

    h.management.push("v1", []);
    const ack = await h.management.waitForRequest(byNonce("1"), "ACK");
    expect(ack.request.versionInfo).toBe("v1");
    expect(ack.request.errorDetail).toBeUndefined();
    expect(ack.request.node?.id).toBe("unit-node");
    expect(h.stream.lastAcceptedVersion).toBe("v1");
  });

  it("NACKs with the last accepted version, the rejected nonce and the reason", async () => {
    const h = start();
    h.management.push("v1", []);
    await h.management.waitForRequest(byNonce("1"), "ACK of v1");
    h.verdicts.push({ ok: false, message: "bad: invalid rate limit unit ''" });
    h.management.push("v2", []);
    const nack = await h.management.waitForRequest(byNonce("2"), "NACK");
    expect(nack.request.versionInfo).toBe("v1");
    expect(nack.request.errorDetail?.message).toBe(
      "bad: invalid rate limit unit ''",
    );
    expect(nack.request.errorDetail?.code).toBe(0);
    expect(h.stream.lastAcceptedVersion).toBe("v1");
    expect(h.stream.lastNonce).toBe("2");
  });

  it("NACKs a response whose processing throws", async () => {
    const h = start();
    h.verdicts.push(new Error("boom"));
    h.management.push("v1", []);
    const nack = await h.management.waitForRequest(byNonce("1"), "NACK");
    expect(nack.request.versionInfo).toBe("");
    expect(nack.request.errorDetail?.message).toBe("boom");
  });

  it("ignores a response of another type URL", async () => {
    const h = start();
    await h.management.waitForRequest(() => true, "first");
    h.management.sendRaw({
      typeUrl: "type.googleapis.com/other",
      versionInfo: "x",
    });
    h.management.push("v1", []);
    await h.management.waitForRequest(byNonce("2"), "ACK of v1");
    expect(h.management.requests.some(byNonce("1"))).toBe(false);
    expect(h.responses.map((r) => r.versionInfo)).toEqual(["v1"]);
  });

  it("re-opens an ended stream after the backoff, resuming with the last version and nonce", async () => {
    const h = start();
    h.management.push("v1", []);
    await h.management.waitForRequest(byNonce("1"), "ACK of v1");
    h.verdicts.push({ ok: false, message: "no" });
    h.management.push("v2", []);
    await h.management.waitForRequest(byNonce("2"), "NACK of v2");

    h.management.endStreams();
    const resumed = await h.management.waitForRequest(
      (r) => r.streamId === 2,
      "first request of the second stream",
    );
    expect(resumed.request.versionInfo).toBe("v1");
    expect(resumed.request.responseNonce).toBe("2");
    expect(h.delays).toEqual([10]);
  });

  it("waits longer after each failed connection and starts over once a response arrives", async () => {
    const h = start();
    h.failConnects = 0;
    await h.management.waitForRequest(() => true, "first");
    h.failConnects = 3;
    h.management.endStreams(); // no response yet on this stream: no reset
    await h.management.waitForRequest((r) => r.streamId === 2, "stream 2");
    expect(h.delays).toEqual([10, 20, 40, 40]);
    expect(h.connects).toBe(5);

    h.management.push("v1", []); // a response resets the backoff
    await h.management.waitForRequest(byNonce("1"), "ACK of v1");
    h.management.endStreams();
    await h.management.waitForRequest((r) => r.streamId === 3, "stream 3");
    expect(h.delays).toEqual([10, 20, 40, 40, 10]);
  });

  it("close() ends a pending backoff wait at once and does not reconnect", async () => {
    let cancelled = false;
    let scheduled: () => void = () => undefined;
    const waiting = new Promise<void>((resolve) => {
      scheduled = resolve;
    });
    // A timer that never fires.
    const h = start(() => {
      scheduled();
      return () => {
        cancelled = true;
      };
    });
    await h.management.waitForRequest(() => true, "first");
    h.management.endStreams();
    await waiting;
    await h.stream.close();
    expect(cancelled).toBe(true);
    expect(h.connects).toBe(1);
    await h.stream.close(); // idempotent
  });

  it("close() tears down an open stream", async () => {
    const h = start();
    await h.management.waitForRequest(() => true, "first");
    await h.stream.close();
    h.management.push("v1", []);
    await new Promise((resolve) => setImmediate(resolve));
    expect(h.responses).toEqual([]);
    expect(h.connects).toBe(1);
  });
});
