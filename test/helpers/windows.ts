import { pause } from "./load.js";

/**
 * Waits until a run of `seconds` fits in the current wall-clock minute (starting at least
 * 1 s into it), so a per-minute rule keeps one fixed window for the whole run. Returns that
 * window's start in Unix seconds. For tests that drive a separate process whose clock the
 * test cannot fake; in-process tests use a fake clock instead.
 *
 * @param seconds - how long the run may take, in seconds (must be below 59)
 */
export async function minuteWithRoom(seconds: number): Promise<number> {
  if (!(seconds > 0 && seconds < 59))
    throw new RangeError(`run of ${seconds} s cannot fit in a minute`);
  for (;;) {
    const into = Date.now() % 60_000;
    if (into >= 1000 && into + seconds * 1000 < 60_000)
      return Math.floor(Date.now() / 60_000) * 60;
    await pause(into < 1000 ? 1000 - into : 61_000 - into);
  }
}
