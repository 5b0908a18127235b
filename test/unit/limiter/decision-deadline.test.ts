import { describe, expect, it } from "vitest";
import { BackendError } from "../../../src/limiter/backend-error.js";
import {
  DecisionDeadline,
  DecisionDeadlineError,
  type DecisionDeadlineOptions,
  type DeadlineTimer,
} from "../../../src/limiter/decision-deadline.js";
import { FakeClock } from "../../helpers/fake-clock.js";

/** Timers the test fires by hand; each remembers its delay. */
class FakeTimer implements DeadlineTimer<number> {
  private nextId = 1;
  readonly pending = new Map<number, { delayMs: number; fire: () => void }>();
  set(callback: () => void, delayMs: number): number {
    const id = this.nextId++;
    this.pending.set(id, { delayMs, fire: callback });
    return id;
  }
  clear(handle: number): void {
    this.pending.delete(handle);
  }
  /** Delays of the armed timers, in milliseconds. */
  delays(): number[] {
    return [...this.pending.values()].map((t) => t.delayMs);
  }
  fireAll(): void {
    const due = [...this.pending.values()];
    this.pending.clear();
    for (const t of due) t.fire();
  }
}

function deadline(extra: Partial<DecisionDeadlineOptions> = {}): {
  clock: FakeClock;
  timer: FakeTimer;
  deadline: DecisionDeadline;
} {
  const clock = new FakeClock(1000);
  const timer = new FakeTimer();
  return {
    clock,
    timer,
    deadline: new DecisionDeadline({
      backendName: "kv",
      nowMs: () => clock.nowMs(),
      timer,
      ...extra,
    }),
  };
}

/** A backend call that never settles (a store that stopped answering). */
const hanging = (): Promise<string> => new Promise(() => undefined);

describe("DecisionDeadline", () => {
  it("arms no timer when nothing bounds the wait", () => {
    const { timer, deadline: d } = deadline();
    const decision = hanging();
    expect(d.bound(decision, undefined)).toBe(decision);
    expect(timer.delays()).toEqual([]);
  });

  it("fails the decision at BACKEND_DECISION_TIMEOUT", async () => {
    const { timer, deadline: d } = deadline({ decisionTimeoutMs: 20 });
    const answer = d.bound(hanging(), undefined);
    expect(timer.delays()).toEqual([20]);
    timer.fireAll();
    await expect(answer).rejects.toBeInstanceOf(BackendError);
    await expect(answer).rejects.toThrow(
      "kv backend did not answer within 20 ms (BACKEND_DECISION_TIMEOUT)",
    );
  });

  it("answers before the caller's deadline passes, keeping a reserve", async () => {
    const { clock, timer, deadline: d } = deadline({ decisionTimeoutMs: 100 });
    // 40 ms left: the reserve is 5 ms.
    const answer = d.bound(hanging(), clock.nowMs() + 40);
    expect(timer.delays()).toEqual([35]);
    timer.fireAll();
    await expect(answer).rejects.toThrow(
      "kv backend did not answer within 35 ms (the caller's deadline)",
    );
    // 8 ms left: the reserve is a quarter, 2 ms.
    void d.bound(hanging(), clock.nowMs() + 8).catch(() => undefined);
    expect(timer.delays()).toEqual([6]);
  });

  it("arms whole milliseconds, never later than the bound, when the time left is fractional", async () => {
    const { clock, timer, deadline: d } = deadline();
    // A Go client's grpc-timeout is to the microsecond: 40.987 ms left, less the 5 ms reserve.
    const answer = d.bound(hanging(), clock.nowMs() + 40.987);
    expect(timer.delays()).toEqual([35]);
    timer.fireAll();
    await expect(answer).rejects.toThrow(
      "kv backend did not answer within 35 ms (the caller's deadline)",
    );
    // One delay for every call with the same whole milliseconds left: Node reuses one timer list.
    void d.bound(hanging(), clock.nowMs() + 40.2).catch(() => undefined);
    void d.bound(hanging(), clock.nowMs() + 40.9).catch(() => undefined);
    expect(timer.delays()).toEqual([35, 35]);
  });

  it("arms no timer for a caller's deadline beyond what a Node timer holds", () => {
    const { clock, timer, deadline: d } = deadline();
    const decision = hanging();
    // grpc-timeout 99999999H: Node would turn the delay into 1 ms.
    expect(d.bound(decision, clock.nowMs() + 99_999_999 * 3_600_000)).toBe(
      decision,
    );
    expect(timer.delays()).toEqual([]);
  });

  it("keeps BACKEND_DECISION_TIMEOUT when the caller's deadline is further", async () => {
    const { clock, timer, deadline: d } = deadline({ decisionTimeoutMs: 20 });
    const answer = d.bound(hanging(), clock.nowMs() + 1000);
    expect(timer.delays()).toEqual([20]);
    timer.fireAll();
    await expect(answer).rejects.toThrow(/\(BACKEND_DECISION_TIMEOUT\)/);
  });

  it("answers at once when the caller's deadline has passed", async () => {
    const { clock, timer, deadline: d } = deadline();
    const answer = d.bound(hanging(), clock.nowMs() - 10);
    expect(timer.delays()).toEqual([0]);
    timer.fireAll();
    await expect(answer).rejects.toThrow(
      "kv backend did not answer within 0 ms (the caller's deadline)",
    );
  });

  it("arms no timer when the backend's own timeout comes first", () => {
    const {
      clock,
      timer,
      deadline: d,
    } = deadline({
      decisionTimeoutMs: 50,
      backendTimeoutMs: 50,
    });
    const decision = hanging();
    expect(d.bound(decision, undefined)).toBe(decision);
    expect(d.bound(decision, clock.nowMs() + 1000)).toBe(decision);
    expect(timer.delays()).toEqual([]);
    // A caller's deadline nearer than the backend timeout still bounds it.
    void d.bound(decision, clock.nowMs() + 40).catch(() => undefined);
    expect(timer.delays()).toEqual([35]);
  });

  it("passes the backend's answer through and clears the timer", async () => {
    const { timer, deadline: d } = deadline({ decisionTimeoutMs: 20 });
    expect(await d.bound(Promise.resolve("statuses"), undefined)).toBe(
      "statuses",
    );
    expect(timer.delays()).toEqual([]);
    const failure = new BackendError("kv", "kv store error");
    await expect(d.bound(Promise.reject(failure), undefined)).rejects.toBe(
      failure,
    );
    // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors -- a client that rejects with a string
    const text = Promise.reject("text");
    await expect(d.bound(text, undefined)).rejects.toThrow(new Error("text"));
    expect(timer.delays()).toEqual([]);
  });

  it("drops the backend's late answer", async () => {
    const { timer, deadline: d } = deadline({ decisionTimeoutMs: 20 });
    let answerLate: (value: string) => void = () => undefined;
    const late = new Promise<string>((resolve) => {
      answerLate = resolve;
    });
    const answer = d.bound(late, undefined);
    timer.fireAll();
    answerLate("statuses");
    await expect(answer).rejects.toThrow(/did not answer within 20 ms/);
  });

  it("keeps the backend's call, still pending, in the deadline's error", async () => {
    const { timer, deadline: d } = deadline({ decisionTimeoutMs: 20 });
    let answerLate: (value: string) => void = () => undefined;
    const late = new Promise<string>((resolve) => {
      answerLate = resolve;
    });
    const answer = d.bound(late, undefined);
    timer.fireAll();
    const err: unknown = await answer.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DecisionDeadlineError);
    expect(err).toBeInstanceOf(BackendError);
    const pending = (err as DecisionDeadlineError).pending;
    expect(pending).toBe(late);
    answerLate("statuses");
    expect(await pending).toBe("statuses");
  });

  it("checks its numbers", () => {
    expect(() => deadline({ decisionTimeoutMs: -1 })).toThrow(
      "invalid decisionTimeoutMs -1: expected ≥ 0",
    );
  });
});
