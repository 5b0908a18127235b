// The messages the workers of `WORKERS` > 1 and their primary exchange over node:cluster's IPC
// channel, so that the day-2 features answer for the whole group rather than one worker:
// run-time overrides on the memory store are sequenced by the primary and applied by every
// worker (worker-group.ts, worker-relay.ts), and TopOffenders and the canary's calls are fanned
// out to every worker and their answers merged.

import type { JsonValue } from "@bufbuild/protobuf";

/** The admin methods fanned out to every worker. */
export type FanoutMethod =
  "topOffenders" | "startCanary" | "getCanaryReport" | "stopCanary";

/** One override change, as the workers replay it in the primary's order. */
export type OverrideChange =
  | {
      readonly op: "set";
      /** The record's stored form (`overrideToJson`). */
      readonly record: string;
    }
  | {
      readonly op: "delete";
      readonly domain: string;
      readonly entries: readonly { key: string; value: string }[];
      readonly actor: string;
      readonly reason: string;
      /** The audit record's time, ms since the epoch. */
      readonly timeMs: number;
    };

/** An audit entry as it crosses the channel (records in their stored form). */
export interface AuditEntryJson {
  readonly timeMs: number;
  readonly domain: string;
  readonly actor: string;
  readonly action: "set" | "delete" | "expire";
  readonly reason: string;
  readonly before?: string;
  readonly after?: string;
}

/** Messages a worker sends its primary. */
export type ToPrimary =
  /** The worker listens: send it changes and fanned-out calls from now on. */
  | { readonly t: "rls-hello" }
  | {
      readonly t: "rls-override-change";
      readonly id: number;
      readonly change: OverrideChange;
    }
  | { readonly t: "rls-override-state" }
  | {
      readonly t: "rls-fanout";
      readonly id: number;
      readonly method: FanoutMethod;
      readonly request: JsonValue;
    }
  | {
      readonly t: "rls-fanout-reply";
      readonly id: number;
      readonly response?: JsonValue;
      /** Why the worker's call failed (its error message). */
      readonly error?: string;
    };

/** Messages the primary sends a worker. */
export type ToWorker =
  | {
      readonly t: "rls-override-apply";
      /** The change's place in the primary's order (1, 2, …). */
      readonly seq: number;
      readonly change: OverrideChange;
      /** Set in the copy sent to the worker that asked for the change: its id. */
      readonly reply?: number;
    }
  | {
      readonly t: "rls-override-failed";
      readonly id: number;
      readonly message: string;
    }
  | {
      readonly t: "rls-override-state";
      /** The last change the state includes. */
      readonly seq: number;
      readonly overrides: readonly string[];
      readonly audit: readonly AuditEntryJson[];
    }
  | {
      readonly t: "rls-fanout-call";
      readonly id: number;
      readonly method: FanoutMethod;
      readonly request: JsonValue;
    }
  | {
      readonly t: "rls-fanout-result";
      readonly id: number;
      /** The other workers' answers (the asking worker's own is not among them). */
      readonly responses: readonly JsonValue[];
      /** Workers that failed or did not answer in time. */
      readonly missing: number;
    };

/** One end of the IPC channel (a worker's `process`, or a test's pair of emitters). */
export interface WorkerChannel<In, Out> {
  send(message: Out): void;
  onMessage(listener: (message: In) => void): void;
}

/** Whether an IPC message is one of ours (`t` starting with `rls-`). */
export function isGroupMessage(message: unknown): boolean {
  return (
    typeof message === "object" &&
    message !== null &&
    "t" in message &&
    typeof message.t === "string" &&
    message.t.startsWith("rls-")
  );
}
