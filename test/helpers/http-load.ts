// A fixed-rate ("open model") HTTP load: requests are sent on a schedule whatever the answers
// do (a slow or refused request never delays the next one), and every answer is counted by
// the second its request was sent in. For end-to-end tests of rate limits through Envoy, where
// the question is how many of a known offered rate got through.

import { Agent, request } from "node:http";

/** One step of a load schedule: `rate` requests per second for `seconds`. */
export interface LoadStep {
  readonly seconds: number;
  /** Requests per second (spread evenly, paced by elapsed time). */
  readonly rate: number;
}

/** Answers of the requests sent in one second. */
export interface SecondCounts {
  /** 200 answers. */
  ok: number;
  /** 429 answers. */
  limited: number;
  /** Any other status, or a transport error. */
  other: number;
}

/** Options of {@link runHttpLoad}. */
export interface HttpLoadOptions {
  /** Full URL to GET. */
  readonly url: string;
  readonly headers?: Readonly<Record<string, string>>;
  readonly schedule: readonly LoadStep[];
  /** Per-request timeout in milliseconds. @defaultValue 5000 */
  readonly timeoutMs?: number;
}

/** Result of {@link runHttpLoad}: per second of the schedule, what the requests sent in it got. */
export interface HttpLoadResult {
  readonly seconds: readonly SecondCounts[];
  /** The first error message seen, if any request failed at the transport level. */
  readonly firstError?: string;
}

/** Requests due by `t` seconds into the schedule. */
function dueBy(schedule: readonly LoadStep[], t: number): number {
  let due = 0;
  let start = 0;
  for (const step of schedule) {
    const span = Math.min(Math.max(t - start, 0), step.seconds);
    due += span * step.rate;
    start += step.seconds;
  }
  return Math.floor(due);
}

/**
 * Sends the schedule's requests at their fixed rate over a keep-alive agent (sockets are
 * opened as needed, so a slow answer never holds back the next request) and resolves once the
 * schedule is over and every request has been answered or timed out.
 */
export async function runHttpLoad(
  options: HttpLoadOptions,
): Promise<HttpLoadResult> {
  const total = options.schedule.reduce((s, step) => s + step.seconds, 0);
  const seconds: SecondCounts[] = Array.from(
    { length: Math.ceil(total) },
    () => ({
      ok: 0,
      limited: 0,
      other: 0,
    }),
  );
  const agent = new Agent({ keepAlive: true, maxSockets: Infinity });
  const url = new URL(options.url);
  const timeoutMs = options.timeoutMs ?? 5000;
  let firstError: string | undefined;
  let pending = 0;
  let sent = 0;
  let allSent!: () => void;
  const done = new Promise<void>((resolve) => (allSent = resolve));
  let finished = false;
  const settle = (): void => {
    pending -= 1;
    if (finished && pending === 0) allSent();
  };

  const send = (second: number): void => {
    const counts = seconds[Math.min(second, seconds.length - 1)]!;
    pending += 1;
    const req = request(
      url,
      { method: "GET", agent, headers: options.headers, timeout: timeoutMs },
      (res) => {
        res.resume();
        res.on("end", () => {
          if (res.statusCode === 200) counts.ok += 1;
          else if (res.statusCode === 429) counts.limited += 1;
          else counts.other += 1;
          settle();
        });
      },
    );
    req.on("timeout", () => req.destroy(new Error("timeout")));
    req.on("error", (err) => {
      counts.other += 1;
      firstError ??= err.message;
      settle();
    });
    req.end();
  };

  const start = performance.now();
  await new Promise<void>((resolve) => {
    const ticker = setInterval(() => {
      const t = (performance.now() - start) / 1000;
      const due = dueBy(options.schedule, Math.min(t, total));
      while (sent < due) {
        sent += 1;
        send(Math.floor(t));
      }
      if (t >= total) {
        clearInterval(ticker);
        resolve();
      }
    }, 2);
  });
  finished = true;
  if (pending > 0) await done;
  agent.destroy();
  return firstError === undefined ? { seconds } : { seconds, firstError };
}
