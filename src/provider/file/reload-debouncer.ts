/**
 * Schedules `callback` to run once after `delayMs` milliseconds and returns a function that
 * cancels it. The default uses an unref'd `setTimeout`, so a pending reload never keeps the
 * process alive on its own.
 */
export type ScheduleTimer = (
  callback: () => void,
  delayMs: number,
) => () => void;

/** Options of {@link createReloadDebouncer}. */
export interface ReloadDebouncerOptions {
  /**
   * Quiet time between the first change of a burst and the reload, in milliseconds; changes
   * arriving in that time are folded into the same reload.
   */
  readonly delayMs: number;
  /**
   * The reload. Runs are serialized: never two at a time. It should not reject; a rejection is
   * handed to `onError` and does not stop later runs.
   */
  readonly run: () => Promise<void>;
  /** Receives a rejection of `run`. */
  readonly onError: (err: unknown) => void;
  /** Timer source; tests inject a fake. @defaultValue an unref'd `setTimeout` */
  readonly schedule?: ScheduleTimer;
}

/**
 * Coalesces bursts of change notifications into few reloads, with one guarantee: every
 * `trigger()` is followed by a run that starts after it. A trigger while a run is in progress
 * schedules one more run when that run ends, because the running reload may already have read
 * the files the change touched.
 */
export interface ReloadDebouncer {
  /** Notes a change: schedules a run unless one is already scheduled. */
  trigger(): void;
  /**
   * Runs now (after the run in progress, if any), cancelling a scheduled run, which this one
   * covers. Resolves when the run has finished.
   */
  runNow(): Promise<void>;
  /** Cancels the scheduled run and waits for the run in progress; idempotent. */
  close(): Promise<void>;
}

const defaultSchedule: ScheduleTimer = (callback, delayMs) => {
  const timer = setTimeout(callback, delayMs);
  timer.unref();
  return () => {
    clearTimeout(timer);
  };
};

/** Creates a {@link ReloadDebouncer}. */
export function createReloadDebouncer(
  options: ReloadDebouncerOptions,
): ReloadDebouncer {
  const schedule = options.schedule ?? defaultSchedule;
  let cancelTimer: (() => void) | undefined;
  let running: Promise<void> | undefined;
  let rerun = false;
  let closed = false;

  const startTimer = (): void => {
    cancelTimer = schedule(() => {
      cancelTimer = undefined;
      void runSerialized();
    }, options.delayMs);
  };

  const runSerialized = async (): Promise<void> => {
    while (running !== undefined) await running;
    if (closed) return;
    const current = (async () => {
      try {
        await options.run();
      } catch (err) {
        options.onError(err);
      }
    })();
    running = current;
    await current;
    running = undefined;
    scheduleRerun();
  };

  // A separate function: inside runSerialized the compiler would keep `closed` narrowed to
  // false across the await.
  const scheduleRerun = (): void => {
    if (rerun && !closed && cancelTimer === undefined) {
      rerun = false;
      startTimer();
    }
  };

  return {
    trigger() {
      if (closed || cancelTimer !== undefined) return;
      if (running !== undefined) {
        rerun = true;
        return;
      }
      startTimer();
    },
    async runNow() {
      cancelTimer?.();
      cancelTimer = undefined;
      await runSerialized();
    },
    async close() {
      closed = true;
      cancelTimer?.();
      cancelTimer = undefined;
      rerun = false;
      while (running !== undefined) await running;
    },
  };
}
