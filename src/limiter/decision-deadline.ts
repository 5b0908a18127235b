import { maxTimerDelayMs } from "../util/timer-range.js";
import { BackendError } from "./backend-error.js";

/**
 * A one-shot timer: `set` runs `callback` once after `delayMs` milliseconds and returns a
 * handle that `clear` cancels. A pair rather than the providers' `ScheduleTimer` (which
 * returns a cancel function): a decision with a deadline allocates no closure for it.
 */
export interface DeadlineTimer<Handle = unknown> {
  set(callback: () => void, delayMs: number): Handle;
  clear(handle: Handle): void;
}

/**
 * The decision deadline passed before the backend answered: a {@link BackendError} that keeps
 * the backend's call, still pending, so its own outcome can be learnt later (a reply: the
 * store counted the request; a failure: it may not have).
 */
export class DecisionDeadlineError extends BackendError {
  /** The backend's call the deadline gave up on; it settles as the backend's call does. */
  readonly pending: Promise<unknown>;
  constructor(backend: string, message: string, pending: Promise<unknown>) {
    super(backend, message);
    this.pending = pending;
  }
}

/** Options of {@link DecisionDeadline}. */
export interface DecisionDeadlineOptions {
  /** Stats word of the backend (`kv`, `mc`), used in the error text. */
  readonly backendName: string;
  /**
   * Longest a decision waits on the backend, in milliseconds (`BACKEND_DECISION_TIMEOUT`); 0:
   * no bound but the caller's deadline and the backend's own timeouts. @defaultValue 0
   */
  readonly decisionTimeoutMs?: number;
  /**
   * How long the backend itself may take before it fails a call, in milliseconds (kv:
   * `KV_TIMEOUT`); 0: unknown or unbounded. A deadline at least that far away arms no timer
   * (the backend fails first). @defaultValue 0
   */
  readonly backendTimeoutMs?: number;
  /**
   * The clock of the callers' deadlines, in milliseconds (monotonic).
   * @defaultValue `performance.now()`
   */
  readonly nowMs?: () => number;
  /** Timer of the deadline; tests inject a fake. @defaultValue a plain (ref'd) `setTimeout` */
  readonly timer?: DeadlineTimer;
}

const defaultNowMs = (): number => performance.now();

const defaultTimer: DeadlineTimer<ReturnType<typeof setTimeout>> = {
  set: (callback, delayMs) => setTimeout(callback, delayMs),
  clear: (handle) => {
    clearTimeout(handle);
  },
};

/**
 * The decision deadline of the kv or mc backend (docs/failure-modes.md#the-decision-deadline):
 * how long one decision may wait on the backend before the {@link BackendGuard} answers it by
 * the failure mode. It is the earlier of `decisionTimeoutMs` from now and the caller's deadline
 * (`grpc-timeout`) less a reserve for answering: the smaller of 5 ms and a quarter of the time
 * left.
 *
 * No timer is armed when nothing bounds the wait, when the bound is further away than a Node
 * timer holds (`maxTimerDelayMs`, about 24.8 days), or when the backend's own timeout
 * (`backendTimeoutMs`) comes first: the usual call costs one comparison.
 */
export class DecisionDeadline {
  private readonly backendName: string;
  private readonly decisionTimeoutMs: number;
  private readonly backendTimeoutMs: number;
  private readonly nowMs: () => number;
  private readonly timer: DeadlineTimer;

  /** @throws {@link RangeError} when `decisionTimeoutMs` is not ≥ 0 (naming the option) */
  constructor(options: DecisionDeadlineOptions) {
    this.backendName = options.backendName;
    this.decisionTimeoutMs = options.decisionTimeoutMs ?? 0;
    if (!(this.decisionTimeoutMs >= 0))
      throw new RangeError(
        `invalid decisionTimeoutMs ${this.decisionTimeoutMs}: expected ≥ 0`,
      );
    this.backendTimeoutMs = options.backendTimeoutMs ?? 0;
    this.nowMs = options.nowMs ?? defaultNowMs;
    this.timer = options.timer ?? defaultTimer;
  }

  /**
   * Bounds `decision` (the backend's call) by the decision deadline. Past it, the result
   * rejects with a {@link DecisionDeadlineError} naming the bound (`BACKEND_DECISION_TIMEOUT`
   * or the caller's deadline) and holding the backend call, which goes on.
   *
   * @param deadlineAtMs - the caller's deadline on the {@link DecisionDeadlineOptions.nowMs}
   *   clock, in milliseconds; undefined: none
   * @returns `decision` itself when no timer is needed, else a promise that settles as
   *   `decision` does (a non-`Error` rejection wrapped in an `Error`) or rejects at the deadline
   */
  bound<T>(decision: Promise<T>, deadlineAtMs: number | undefined): Promise<T> {
    let waitMs = this.decisionTimeoutMs > 0 ? this.decisionTimeoutMs : Infinity;
    let byCaller = false;
    if (deadlineAtMs !== undefined) {
      const left = deadlineAtMs - this.nowMs();
      const callerWaitMs = left - Math.min(5, left / 4);
      if (callerWaitMs < waitMs) {
        waitMs = Math.max(0, callerWaitMs);
        byCaller = true;
      }
    }
    if (
      waitMs > maxTimerDelayMs ||
      (this.backendTimeoutMs > 0 && waitMs >= this.backendTimeoutMs)
    )
      return decision;
    // Whole milliseconds, rounded down (never later than the bound): Node keeps one timer
    // list per distinct delay, and the caller's time left differs on every call, so an exact
    // delay would create and drop a list on every call (docs/performance.md#round-4-timer-lists).
    waitMs = Math.floor(waitMs);
    const name = this.backendName;
    const timers = this.timer;
    return new Promise((resolve, reject) => {
      const timer = timers.set(() => {
        reject(
          new DecisionDeadlineError(
            name,
            `${name} backend did not answer within ${Math.round(waitMs)} ms (${
              byCaller ? "the caller's deadline" : "BACKEND_DECISION_TIMEOUT"
            })`,
            decision,
          ),
        );
      }, waitMs);
      decision.then(
        (value) => {
          timers.clear(timer);
          resolve(value);
        },
        (err: unknown) => {
          timers.clear(timer);
          reject(err instanceof Error ? err : new Error(String(err)));
        },
      );
    });
  }
}
