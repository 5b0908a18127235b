import { Code } from "@connectrpc/connect";
import { afterEach, describe, expect, it, vi } from "vitest";
import { UnaryCall } from "../../../../src/server/grpc/unary-call.js";

/** A call that records what it would send instead of writing to a stream. */
class RecordingCall extends UnaryCall {
  readonly errors: { code: Code; message: string }[] = [];
  protected isGone(): boolean {
    return false;
  }
  protected respondError(code: Code, message: string): void {
    this.errors.push({ code, message });
  }
  protected respondMessage(): void {
    // Not reached: no decision is started here.
  }
  protected contain(err: unknown): void {
    throw err;
  }
}

function call(): RecordingCall {
  return new RecordingCall(
    {
      handler: () => Promise.reject(new Error("not called")),
      readMaxBytes: 4 << 20,
    },
    {},
  );
}

describe("UnaryCall deadline", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("arms the grpc-timeout timer in whole milliseconds, rounded up", () => {
    vi.useFakeTimers();
    const spy = vi.spyOn(globalThis, "setTimeout");
    // A Go client sends its time left to the microsecond.
    const c = call();
    expect(c.startDeadline("9999982u")).toBe(true);
    expect(spy.mock.calls.map((args) => args[1])).toEqual([10_000]);
    expect(c.deadlineAtMs).toBeCloseTo(performance.now() + 9999.982, 1);
    spy.mockRestore();
  });

  it("answers DEADLINE_EXCEEDED once the rounded deadline passes, not before", () => {
    vi.useFakeTimers();
    const c = call();
    expect(c.startDeadline("1500u")).toBe(true);
    vi.advanceTimersByTime(1);
    expect(c.errors).toEqual([]);
    vi.advanceTimersByTime(1);
    expect(c.errors).toEqual([
      { code: Code.DeadlineExceeded, message: "the operation timed out" },
    ]);
  });

  it("arms no timer for a grpc-timeout beyond what a Node timer holds", () => {
    vi.useFakeTimers();
    const c = call();
    // 99999999 hours: Node would turn the delay into 1 ms.
    expect(c.startDeadline("99999999H")).toBe(true);
    expect(vi.getTimerCount()).toBe(0);
    vi.advanceTimersByTime(3_600_000);
    expect(c.errors).toEqual([]);
    expect(c.deadlineAtMs).toBeGreaterThan(performance.now() + 3.5e14);
  });

  it("refuses a malformed grpc-timeout with INVALID_ARGUMENT and arms nothing", () => {
    vi.useFakeTimers();
    const c = call();
    expect(c.startDeadline("soon")).toBe(false);
    expect(c.errors).toEqual([
      {
        code: Code.InvalidArgument,
        message: "protocol error: invalid grpc timeout value: soon",
      },
    ]);
    expect(vi.getTimerCount()).toBe(0);
  });
});
