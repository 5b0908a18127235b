// The primary's side of the day-2 features with `WORKERS` > 1 (worker-messages.ts): it orders
// the override changes of the memory store and sends each to every worker, keeps its own copy
// of the overrides and audit log for workers that start later, and relays fanned-out admin
// calls to the other workers and their answers back.

import type { Logger } from "pino";
import { overrideToJson } from "../overrides/override-message.js";
import { MemoryOverrideStore } from "../overrides/override-store.js";
import { OverrideTable } from "../overrides/override-table.js";
import { systemClock, type Clock } from "../util/clock.js";
import {
  applyOverrideChange,
  auditEntryToJson,
} from "./worker-override-changes.js";
import type { JsonValue } from "@bufbuild/protobuf";
import type { ToPrimary, ToWorker } from "./worker-messages.js";

/** A worker as the primary sees it. */
export interface RelayWorker {
  /** node:cluster's worker id (unique for the primary's life, also across restarts). */
  readonly id: number;
  send(message: ToWorker): void;
}

/** Options of {@link WorkerRelay}. */
export interface WorkerRelayOptions {
  readonly logger: Logger;
  /**
   * Keep and order the overrides (the memory store: BACKEND_TYPE memory or mc); false with kv,
   * whose store already shares them.
   */
  readonly overrides: boolean;
  /** `ADMIN_AUDIT_LOG_MAX`. */
  readonly auditLogMax: number;
  /** How long a fanned-out call waits for the workers, ms. @defaultValue 5000 */
  readonly timeoutMs?: number;
  readonly clock?: Clock;
}

interface Fanout {
  readonly origin: RelayWorker;
  readonly originId: number;
  readonly waiting: Set<number>;
  readonly responses: JsonValue[];
  missing: number;
  readonly timer: NodeJS.Timeout;
}

/** The primary's relay between its workers (see the file header). */
export class WorkerRelay {
  private readonly logger: Logger;
  private readonly timeoutMs: number;
  private readonly workers = new Map<number, RelayWorker>();
  private readonly store: MemoryOverrideStore | undefined;
  private seq = 0;
  private nextCall = 1;
  private readonly fanouts = new Map<number, Fanout>();

  constructor(options: WorkerRelayOptions) {
    this.logger = options.logger;
    this.timeoutMs = options.timeoutMs ?? 5000;
    const clock = options.clock ?? systemClock;
    this.store = options.overrides
      ? new MemoryOverrideStore({
          table: new OverrideTable({ clock }),
          clock,
          logger: options.logger,
          auditLogMax: options.auditLogMax,
        })
      : undefined;
  }

  /** Starts the expiry sweep of the primary's copy of the overrides. */
  async start(): Promise<void> {
    await this.store?.start();
  }

  /** Stops timers; pending fanned-out calls are answered with what arrived. */
  async close(): Promise<void> {
    for (const id of [...this.fanouts.keys()]) this.finish(id);
    await this.store?.close();
  }

  /** A message from `worker` (a `rls-` one: see `isGroupMessage`). */
  receive(worker: RelayWorker, message: ToPrimary): void {
    switch (message.t) {
      case "rls-hello":
        this.workers.set(worker.id, worker);
        return;
      case "rls-override-state":
        this.sendState(worker);
        return;
      case "rls-override-change":
        void this.change(worker, message.id, message.change);
        return;
      case "rls-fanout":
        this.fanout(worker, message.id, message.method, message.request);
        return;
      case "rls-fanout-reply":
        this.reply(worker.id, message);
        return;
    }
  }

  /** A worker exited: no more messages to it, and its pending answers count as missing. */
  remove(workerId: number): void {
    this.workers.delete(workerId);
    for (const [id, fanout] of this.fanouts)
      if (fanout.waiting.delete(workerId)) {
        fanout.missing++;
        if (fanout.waiting.size === 0) this.finish(id);
      }
  }

  private sendState(worker: RelayWorker): void {
    const state = this.store?.exportState() ?? { overrides: [], audit: [] };
    worker.send({
      t: "rls-override-state",
      seq: this.seq,
      overrides: state.overrides.map(overrideToJson),
      audit: state.audit.map(auditEntryToJson),
    });
  }

  private async change(
    origin: RelayWorker,
    id: number,
    change: Extract<ToPrimary, { t: "rls-override-change" }>["change"],
  ): Promise<void> {
    const store = this.store;
    if (store === undefined) {
      origin.send({
        t: "rls-override-failed",
        id,
        message:
          "the worker group keeps no overrides: they are in the kv store",
      });
      return;
    }
    try {
      await applyOverrideChange(store, change);
    } catch (err) {
      origin.send({
        t: "rls-override-failed",
        id,
        message: `the override change was refused: ${err instanceof Error ? err.message : String(err)}`,
      });
      return;
    }
    const seq = ++this.seq;
    for (const worker of this.workers.values())
      worker.send({
        t: "rls-override-apply",
        seq,
        change,
        ...(worker.id === origin.id ? { reply: id } : {}),
      });
    // The origin may not have said hello (it always has: it sends only after it did).
    if (!this.workers.has(origin.id))
      origin.send({ t: "rls-override-apply", seq, change, reply: id });
  }

  private fanout(
    origin: RelayWorker,
    originId: number,
    method: Extract<ToPrimary, { t: "rls-fanout" }>["method"],
    request: JsonValue,
  ): void {
    const id = this.nextCall++;
    const targets = [...this.workers.values()].filter(
      (w) => w.id !== origin.id,
    );
    const fanout: Fanout = {
      origin,
      originId,
      waiting: new Set(targets.map((w) => w.id)),
      responses: [],
      missing: 0,
      timer: setTimeout(() => {
        this.finish(id);
      }, this.timeoutMs),
    };
    this.fanouts.set(id, fanout);
    for (const worker of targets)
      worker.send({ t: "rls-fanout-call", id, method, request });
    if (targets.length === 0) this.finish(id);
  }

  private reply(
    workerId: number,
    message: Extract<ToPrimary, { t: "rls-fanout-reply" }>,
  ): void {
    const fanout = this.fanouts.get(message.id);
    if (!fanout?.waiting.delete(workerId)) return;
    if (message.response !== undefined) fanout.responses.push(message.response);
    else {
      fanout.missing++;
      this.logger.warn(
        { worker: workerId, error: message.error },
        "a worker failed a fanned-out admin call",
      );
    }
    if (fanout.waiting.size === 0) this.finish(message.id);
  }

  private finish(id: number): void {
    const fanout = this.fanouts.get(id);
    if (fanout === undefined) return;
    this.fanouts.delete(id);
    clearTimeout(fanout.timer);
    fanout.missing += fanout.waiting.size;
    fanout.origin.send({
      t: "rls-fanout-result",
      id: fanout.originId,
      responses: fanout.responses,
      missing: fanout.missing,
    });
  }
}
