import { describe, expect, it } from "vitest";
import {
  createReloadDebouncer,
  type ScheduleTimer,
} from "../../../../src/provider/file/reload-debouncer.js";

/** A manual timer source: timers fire only when the test calls `fire()`. */
function fakeTimers(): {
  schedule: ScheduleTimer;
  pending: () => number;
  fire: () => void;
} {
  const timers = new Set<() => void>();
  return {
    schedule(callback) {
      const timer = (): void => {
        timers.delete(timer);
        callback();
      };
      timers.add(timer);
      return () => timers.delete(timer);
    },
    pending: () => timers.size,
    fire() {
      for (const timer of [...timers]) timer();
    },
  };
}

/** A run whose completion the test controls. */
function controlledRun(): {
  run: () => Promise<void>;
  count: () => number;
  finish: () => void;
} {
  let count = 0;
  let finishCurrent: (() => void) | undefined;
  return {
    run: () => {
      count++;
      return new Promise<void>((resolve) => {
        finishCurrent = resolve;
      });
    },
    count: () => count,
    finish: () => {
      finishCurrent?.();
      finishCurrent = undefined;
    },
  };
}

const flush = async (): Promise<void> => {
  for (let i = 0; i < 10; i++) await Promise.resolve();
};

describe("createReloadDebouncer", () => {
  it("coalesces triggers before the timer fires into one run", async () => {
    const timers = fakeTimers();
    let runs = 0;
    const debouncer = createReloadDebouncer({
      delayMs: 100,
      run: () => {
        runs++;
        return Promise.resolve();
      },
      onError: () => undefined,
      schedule: timers.schedule,
    });
    for (let i = 0; i < 5; i++) debouncer.trigger();
    expect(timers.pending()).toBe(1);
    expect(runs).toBe(0);
    timers.fire();
    await flush();
    expect(runs).toBe(1);
    expect(timers.pending()).toBe(0);
  });

  it("runs once more after the run in progress when triggered during it", async () => {
    const timers = fakeTimers();
    const run = controlledRun();
    const debouncer = createReloadDebouncer({
      delayMs: 100,
      run: run.run,
      onError: () => undefined,
      schedule: timers.schedule,
    });
    debouncer.trigger();
    timers.fire();
    await flush();
    expect(run.count()).toBe(1);
    debouncer.trigger();
    debouncer.trigger();
    expect(timers.pending()).toBe(0);
    run.finish();
    await flush();
    expect(timers.pending()).toBe(1);
    timers.fire();
    await flush();
    expect(run.count()).toBe(2);
    run.finish();
    await flush();
    expect(timers.pending()).toBe(0);
  });

  it("never runs two reloads at a time", async () => {
    const timers = fakeTimers();
    const run = controlledRun();
    const debouncer = createReloadDebouncer({
      delayMs: 100,
      run: run.run,
      onError: () => undefined,
      schedule: timers.schedule,
    });
    const first = debouncer.runNow();
    await flush();
    const second = debouncer.runNow();
    await flush();
    expect(run.count()).toBe(1);
    run.finish();
    await first;
    await flush();
    expect(run.count()).toBe(2);
    run.finish();
    await second;
  });

  it("cancels a scheduled run when running now", async () => {
    const timers = fakeTimers();
    let runs = 0;
    const debouncer = createReloadDebouncer({
      delayMs: 100,
      run: () => {
        runs++;
        return Promise.resolve();
      },
      onError: () => undefined,
      schedule: timers.schedule,
    });
    debouncer.trigger();
    await debouncer.runNow();
    expect(runs).toBe(1);
    expect(timers.pending()).toBe(0);
  });

  it("reports a rejected run and keeps running later ones", async () => {
    const timers = fakeTimers();
    const errors: unknown[] = [];
    let runs = 0;
    const debouncer = createReloadDebouncer({
      delayMs: 100,
      run: () => {
        runs++;
        return runs === 1
          ? Promise.reject(new Error("boom"))
          : Promise.resolve();
      },
      onError: (err) => errors.push(err),
      schedule: timers.schedule,
    });
    await debouncer.runNow();
    debouncer.trigger();
    timers.fire();
    await flush();
    expect(runs).toBe(2);
    expect(errors).toHaveLength(1);
    expect((errors[0] as Error).message).toBe("boom");
  });

  it("cancels the timer on close, waits for the run in progress and ignores later triggers", async () => {
    const timers = fakeTimers();
    const run = controlledRun();
    const debouncer = createReloadDebouncer({
      delayMs: 100,
      run: run.run,
      onError: () => undefined,
      schedule: timers.schedule,
    });
    void debouncer.runNow();
    await flush();
    debouncer.trigger();
    let closed = false;
    const closing = debouncer.close().then(() => {
      closed = true;
    });
    await flush();
    expect(closed).toBe(false);
    run.finish();
    await closing;
    expect(timers.pending()).toBe(0);
    debouncer.trigger();
    expect(timers.pending()).toBe(0);
    await debouncer.runNow();
    expect(run.count()).toBe(1);
    await debouncer.close();
  });
});
