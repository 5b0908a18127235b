// A bounded, paced load of ShouldRateLimit calls over one real gRPC (HTTP/2) connection, with
// every answer recorded by the phase the call started in and by the second it was answered,
// for the fault tests (store killed, paused, config reloaded, SIGTERM under load).

import { create } from "@bufbuild/protobuf";
import { ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import {
  RateLimitRequestSchema,
  RateLimitResponse_Code as RlCode,
  RateLimitService,
} from "../../src/proto.js";

/** What one call got: the overall code, or the gRPC error code name. */
export type Answer = "OK" | "OVER_LIMIT" | `error:${string}`;

/** One finished call. */
export interface CallRecord {
  /** Phase current when the call was sent. */
  readonly phase: string;
  /** Milliseconds from the start of the load to the call being sent. */
  readonly sentAtMs: number;
  /** Milliseconds from the start of the load to the answer. */
  readonly answeredAtMs: number;
  readonly answer: Answer;
  /** Error message, for errors. */
  readonly message?: string;
}

/** Options of {@link runLoad}. */
export interface LoadOptions {
  /** `host:port` of the gRPC listener. */
  readonly address: string;
  readonly domain: string;
  readonly entries: readonly { key: string; value: string }[];
  /** Calls per second. @defaultValue 200 */
  readonly ratePerSecond?: number;
  /** Client deadline per call in milliseconds. @defaultValue 3000 */
  readonly timeoutMs?: number;
  /**
   * The scenario, run while the load goes on: it switches phases with `phase(name)` (the
   * first is "before") and returns when the load should stop.
   */
  readonly scenario: (phase: (name: string) => void) => Promise<void>;
}

/** Result of {@link runLoad}. */
export interface LoadResult {
  readonly calls: readonly CallRecord[];
  /** Calls of one phase. */
  inPhase(phase: string): CallRecord[];
  /** Count of each answer among `calls`. */
  count(calls?: readonly CallRecord[]): Record<string, number>;
  /** One line per second of answers: `t=3s OK=12 OVER_LIMIT=188 error:unavailable=0 [phase]`. */
  timeline(): string;
}

/**
 * Sends `ratePerSecond` calls per second (paced by elapsed time, so a slow moment is caught up
 * without exceeding the rate on average) until the scenario returns, then waits for every call
 * to finish. Calls are not retried.
 */
export async function runLoad(options: LoadOptions): Promise<LoadResult> {
  const rate = options.ratePerSecond ?? 200;
  const client = createClient(
    RateLimitService,
    createGrpcTransport({
      baseUrl: `http://${options.address}`,
    }),
  );
  const request = create(RateLimitRequestSchema, {
    domain: options.domain,
    descriptors: [{ entries: [...options.entries] }],
  });
  const calls: CallRecord[] = [];
  const pending = new Set<Promise<void>>();
  let phase = "before";
  const start = performance.now();
  let sent = 0;
  let stopped = false;

  const send = (): void => {
    const callPhase = phase;
    const sentAtMs = performance.now() - start;
    const p = client
      .shouldRateLimit(request, { timeoutMs: options.timeoutMs ?? 3000 })
      .then(
        (res) => {
          calls.push({
            phase: callPhase,
            sentAtMs,
            answeredAtMs: performance.now() - start,
            answer: res.overallCode === RlCode.OVER_LIMIT ? "OVER_LIMIT" : "OK",
          });
        },
        (err: unknown) => {
          const ce = ConnectError.from(err);
          calls.push({
            phase: callPhase,
            sentAtMs,
            answeredAtMs: performance.now() - start,
            answer: `error:${codeName(ce.code)}`,
            message: ce.rawMessage,
          });
        },
      )
      .finally(() => {
        pending.delete(p);
      });
    pending.add(p);
  };

  const ticker = setInterval(() => {
    if (stopped) return;
    const due = Math.floor(((performance.now() - start) / 1000) * rate);
    while (sent < due) {
      sent++;
      send();
    }
  }, 5);
  try {
    await options.scenario((name) => {
      phase = name;
    });
  } finally {
    stopped = true;
    clearInterval(ticker);
  }
  while (pending.size > 0) await Promise.all([...pending]);

  const result: LoadResult = {
    calls,
    inPhase: (name) => calls.filter((c) => c.phase === name),
    count(subset = calls) {
      const out: Record<string, number> = {};
      for (const c of subset) out[c.answer] = (out[c.answer] ?? 0) + 1;
      return out;
    },
    timeline() {
      const bySecond = new Map<number, CallRecord[]>();
      for (const c of calls) {
        const s = Math.floor(c.answeredAtMs / 1000);
        let list = bySecond.get(s);
        if (list === undefined) bySecond.set(s, (list = []));
        list.push(c);
      }
      const seconds = [...bySecond.keys()].sort((a, b) => a - b);
      return seconds
        .map((s) => {
          const list = bySecond.get(s)!;
          const counts = result.count(list);
          const phases = [...new Set(list.map((c) => c.phase))].join(",");
          const parts = Object.entries(counts)
            .sort(([a], [b]) => (a < b ? -1 : 1))
            .map(([k, v]) => `${k}=${v}`)
            .join(" ");
          return `t=${String(s).padStart(2)}s ${parts} [${phases}]`;
        })
        .join("\n");
    },
  };
  return result;
}

function codeName(code: number): string {
  const names: Record<number, string> = {
    1: "canceled",
    2: "unknown",
    3: "invalid_argument",
    4: "deadline_exceeded",
    8: "resource_exhausted",
    13: "internal",
    14: "unavailable",
  };
  return names[code] ?? `code_${code}`;
}

/** Resolves after `ms` milliseconds (scenario steps only, never an assertion). */
export function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
