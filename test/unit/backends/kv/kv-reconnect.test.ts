import { describe, expect, it } from "vitest";
import { toKvConnectionOptions } from "../../../../src/backends/kv/kv-client-options.js";
import { resolveKvInstanceOptions } from "../../../../src/backends/kv/kv-options.js";

function retry(options: {
  reconnectMaxDelayMs?: number;
}): (attempt: number) => number {
  const mapped = toKvConnectionOptions(
    resolveKvInstanceOptions({
      url: "127.0.0.1:6379",
      socketType: "tcp",
      ...options,
    }),
  );
  if (mapped.kind !== "redis") throw new Error("expected a single instance");
  const strategy = mapped.options.retryStrategy;
  if (strategy === undefined || strategy === null)
    throw new Error("expected a retry strategy");
  return (attempt) => strategy(attempt) as number;
}

describe("kv reconnect options (failure modes)", () => {
  it("keeps the 2 s backoff cap and no on-request reconnect by default", () => {
    const resolved = resolveKvInstanceOptions({
      url: "127.0.0.1:6379",
      socketType: "tcp",
    });
    expect(resolved.reconnectMaxDelayMs).toBe(2000);
    expect(resolved.reconnectOnRequest).toBe(false);
    expect([1, 5, 6, 20].map(retry({}))).toEqual([100, 1600, 2000, 2000]);
  });

  it("caps the backoff at reconnectMaxDelayMs", () => {
    expect([1, 3, 4, 20].map(retry({ reconnectMaxDelayMs: 500 }))).toEqual([
      100, 400, 500, 500,
    ]);
  });

  it("refuses a cap below 1 ms", () => {
    expect(() =>
      resolveKvInstanceOptions({
        url: "127.0.0.1:6379",
        socketType: "tcp",
        reconnectMaxDelayMs: 0,
      }),
    ).toThrow(/reconnectMaxDelayMs/);
  });
});
