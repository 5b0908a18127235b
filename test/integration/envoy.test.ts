// End to end through a real Envoy running the README's example config
// (examples/envoy/envoy.yaml): Envoy's HTTP rate-limit filter asks this service (in process,
// memory backend) about every request and answers 429 itself when told OVER_LIMIT.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  startExampleEnvoy,
  startUpstream,
  type TestEnvoy,
  type Upstream,
} from "../helpers/envoy.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";

// Hour windows, so that no window boundary falls inside the test (see waitAwayFromBoundary).
// The example's descriptors: category=<x-category>, foo=<x-foo> + bar=<x-bar>, and
// remote_address, which this config does not limit.
const config = `
domain: rl
descriptors:
  - key: category
    value: account
    rate_limit: { unit: hour, requests_per_unit: 3 }
  - key: foo
    descriptors:
      - key: bar
        value: bkthomps
        rate_limit: { name: bkthomps, unit: hour, requests_per_unit: 1 }
`;

/** Seconds until the current hour window ends, by the wall clock. */
function secondsLeftInHour(): number {
  return 3600 - (Math.floor(Date.now() / 1000) % 3600);
}

/** Waits out the last 15 s of an hour, so that every request below shares one window. */
async function waitAwayFromBoundary(): Promise<void> {
  const left = secondsLeftInHour();
  if (left <= 15) await new Promise((r) => setTimeout(r, (left + 1) * 1000));
}

let app: TestApp;
let upstream: Upstream;
let envoy: TestEnvoy;

beforeAll(async () => {
  app = await startTestApp({ "rl.yaml": config });
  upstream = await startUpstream();
  const grpcPort = Number(app.addresses.grpc.split(":").pop());
  envoy = await startExampleEnvoy(
    { host: "127.0.0.1", port: grpcPort },
    { host: "127.0.0.1", port: upstream.port },
    "5s",
  );
  await waitAwayFromBoundary();
}, 60_000);

afterAll(async () => {
  await envoy.stop();
  await upstream.stop();
  await app.stop();
});

interface Answer {
  status: number;
  body: string;
  limited: string | null;
  limit: string | null;
  remaining: string | null;
  reset: number;
  /** Bounds on `reset` from the wall clock read just before and just after the request. */
  resetBounds: [number, number];
}

/** GET / through Envoy with the given request headers. */
async function get(headers: Record<string, string>): Promise<Answer> {
  const before = secondsLeftInHour();
  const response = await fetch(`${envoy.url}/`, { headers });
  const body = await response.text();
  const after = secondsLeftInHour();
  return {
    status: response.status,
    body,
    limited: response.headers.get("x-envoy-ratelimited"),
    limit: response.headers.get("x-ratelimit-limit"),
    remaining: response.headers.get("x-ratelimit-remaining"),
    reset: Number(response.headers.get("x-ratelimit-reset")),
    resetBounds: [after, before],
  };
}

/** Asserts the reset header is the time left in the current hour window. */
function expectResetInWindow(answer: Answer): void {
  const [low, high] = answer.resetBounds;
  expect(answer.reset).toBeGreaterThanOrEqual(low - 1);
  expect(answer.reset).toBeLessThanOrEqual(high);
}

describe("through a real Envoy with examples/envoy/envoy.yaml", () => {
  it("passes requests within the limit, then answers 429 with x-envoy-ratelimited (category descriptor)", async () => {
    const account = { "x-category": "account" };
    for (const remaining of ["2", "1", "0"]) {
      const answer = await get(account);
      expect(answer.status).toBe(200);
      expect(answer.body).toBe("upstream ok");
      expect(answer.limited).toBeNull();
      // Envoy's draft-03 headers: the limit with the smallest remaining count, then each
      // limit with its window in seconds.
      expect(answer.limit).toBe("3, 3;w=3600");
      expect(answer.remaining).toBe(remaining);
      expectResetInWindow(answer);
    }
    const over = await get(account);
    expect(over.status).toBe(429);
    expect(over.limited).toBe("true");
    expect(over.body).not.toBe("upstream ok");
    expect(over.limit).toBe("3, 3;w=3600");
    expect(over.remaining).toBe("0");
    expectResetInWindow(over);
  });

  it("counts each descriptor value separately (foo + bar descriptor, named limit)", async () => {
    const first = await get({ "x-foo": "a", "x-bar": "bkthomps" });
    expect(first.status).toBe(200);
    expect(first.limit).toBe('1, 1;w=3600;name="bkthomps"');
    expect(first.remaining).toBe("0");
    expectResetInWindow(first);

    const again = await get({ "x-foo": "a", "x-bar": "bkthomps" });
    expect(again.status).toBe(429);
    expect(again.limited).toBe("true");

    // Another value of foo is another counter; category=account is still over its limit.
    const other = await get({ "x-foo": "b", "x-bar": "bkthomps" });
    expect(other.status).toBe(200);
    expect(other.remaining).toBe("0");
  });

  it("adds no X-RateLimit headers when no limit applies, and one 429 wins over an OK descriptor", async () => {
    const unlimited = await get({ "x-category": "other" });
    expect(unlimited.status).toBe(200);
    expect(unlimited.body).toBe("upstream ok");
    expect(unlimited.limit).toBeNull();
    expect(unlimited.remaining).toBeNull();

    // category=account is over (0 left), foo=c + bar=bkthomps is within (0 left after it).
    const both = await get({
      "x-category": "account",
      "x-foo": "c",
      "x-bar": "bkthomps",
    });
    expect(both.status).toBe(429);
    expect(both.limited).toBe("true");
    expect(both.limit).toBe('3, 3;w=3600, 1;w=3600;name="bkthomps"');
    expect(both.remaining).toBe("0");
  });

  it("asked the service for every request and let none through unchecked", async () => {
    // 200s so far: 3 (account) + 1 (foo=a) + 1 (foo=b) + 1 (category=other).
    expect(upstream.requests()).toBe(6);
    const counters = await envoy.counters("cluster.backend.ratelimit.");
    // Envoy creates these counters on first use: a missing one has never counted.
    const count = (name: string): number =>
      counters[`cluster.backend.ratelimit.${name}`] ?? 0;
    expect({
      ok: count("ok"),
      overLimit: count("over_limit"),
      error: count("error"),
      failureModeAllowed: count("failure_mode_allowed"),
    }).toEqual({ ok: 6, overLimit: 3, error: 0, failureModeAllowed: 0 });
  });
});
