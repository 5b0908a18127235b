// A worker's side of the day-2 features with `WORKERS` > 1 (worker-messages.ts): the worker
// processes share the listening ports, so an admin call reaches one of them, yet its effect or
// answer must be the group's.
//
// - Run-time overrides on the memory store (BACKEND_TYPE=mc; kv already shares them through
//   the store): a change goes to the primary, which orders it and sends it to every worker,
//   this one included; each applies it to its own table and audit log, so all hold the same
//   overrides and log. A worker that starts (or restarts) takes the primary's copy first.
// - TopOffenders, StartCanary, GetCanaryReport, StopCanary: the worker asked answers with its
//   own result merged with the other workers' (each counted its share of the traffic).

import {
  create,
  fromJson,
  toJson,
  type DescMessage,
  type JsonValue,
  type MessageInitShape,
  type MessageShape,
} from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createHandlerContext,
  type HandlerContext,
} from "@connectrpc/connect";
import type { Logger } from "pino";
import type {
  AdminParts,
  CanaryAdmin,
  OffendersAdmin,
} from "../admin/admin-routes.js";
import { mergeCanaryReports } from "../canary/merge-canary-reports.js";
import { BackendError } from "../limiter/backend-error.js";
import { mergeTopOffenders } from "../offenders/merge-offenders.js";
import type { OverrideEntry } from "../overrides/override-key.js";
import {
  overrideFromJson,
  overrideToJson,
} from "../overrides/override-message.js";
import type {
  MemoryOverrideStore,
  OverrideStore,
} from "../overrides/override-store.js";
import type { OverrideRecord } from "../overrides/override-table.js";
import {
  AdminService,
  GetCanaryReportResponseSchema,
  StopCanaryResponseSchema,
  TopOffendersResponseSchema,
  type AuditRecord,
} from "../proto.js";
import {
  applyOverrideChange,
  auditEntryFromJson,
} from "./worker-override-changes.js";
import type {
  FanoutMethod,
  OverrideChange,
  ToPrimary,
  ToWorker,
  WorkerChannel,
} from "./worker-messages.js";

/** Options of {@link WorkerGroup}. */
export interface WorkerGroupOptions {
  /** This worker's end of the IPC channel to the primary. */
  readonly channel: WorkerChannel<ToWorker, ToPrimary>;
  readonly logger: Logger;
  /**
   * How long to wait for the primary (an override change, the start's state) or for the other
   * workers (a fanned-out call), in ms. @defaultValue 5000
   */
  readonly timeoutMs?: number;
}

interface Pending<T> {
  resolve(value: T): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

type FanoutResult = Extract<ToWorker, { t: "rls-fanout-result" }>;
type ApplyMessage = Extract<ToWorker, { t: "rls-override-apply" }>;
type StateMessage = Extract<ToWorker, { t: "rls-override-state" }>;

/** This worker's link to the primary and, through it, to the other workers. */
export class WorkerGroup {
  private readonly channel: WorkerChannel<ToWorker, ToPrimary>;
  private readonly logger: Logger;
  private readonly timeoutMs: number;
  private nextId = 1;
  private readonly changes = new Map<
    number,
    Pending<OverrideRecord | undefined>
  >();
  private readonly fanouts = new Map<number, Pending<FanoutResult>>();
  private readonly handlers = new Map<
    FanoutMethod,
    (request: JsonValue) => Promise<JsonValue>
  >();
  /** Receives the primary's override messages ({@link ReplicatedOverrideStore}). */
  overrideListener:
    ((message: ApplyMessage | StateMessage) => void) | undefined;

  constructor(options: WorkerGroupOptions) {
    this.channel = options.channel;
    this.logger = options.logger;
    this.timeoutMs = options.timeoutMs ?? 5000;
    this.channel.onMessage((message) => {
      this.receive(message);
    });
    this.channel.send({ t: "rls-hello" });
  }

  /**
   * Sends an override change to the primary and resolves with what applying it here returned
   * (the override replaced or deleted), once the primary's copy of it has been applied.
   *
   * @throws {@link BackendError} when the primary refuses it or does not answer in time
   */
  change(change: OverrideChange): Promise<OverrideRecord | undefined> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.changes.delete(id);
        reject(
          new BackendError(
            "memory",
            `override store unavailable: the worker group's primary did not answer within ${String(this.timeoutMs)} ms`,
          ),
        );
      }, this.timeoutMs);
      this.changes.set(id, { resolve, reject, timer });
      this.channel.send({ t: "rls-override-change", id, change });
    });
  }

  /** Settles the pending change `id` with what applying it returned. */
  settleChange(
    id: number,
    result: OverrideRecord | undefined,
    error?: Error,
  ): void {
    const pending = this.changes.get(id);
    if (pending === undefined) return;
    this.changes.delete(id);
    clearTimeout(pending.timer);
    if (error !== undefined) pending.reject(error);
    else pending.resolve(result);
  }

  /** Asks the primary for its copy of the overrides and audit log (answered to the listener). */
  requestOverrideState(): void {
    this.channel.send({ t: "rls-override-state" });
  }

  /** Serves `method` for the other workers' fanned-out calls. */
  serve(
    method: FanoutMethod,
    handler: (request: JsonValue) => Promise<JsonValue>,
  ): void {
    this.handlers.set(method, handler);
  }

  /**
   * Calls `method` on every other worker; resolves with their answers (those that failed or
   * did not answer within the timeout are counted in `missing` and logged).
   */
  fanout(method: FanoutMethod, request: JsonValue): Promise<FanoutResult> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.fanouts.delete(id);
        reject(
          new Error(
            `the worker group's primary did not answer ${method} within ${String(this.timeoutMs)} ms`,
          ),
        );
      }, this.timeoutMs + 1000);
      this.fanouts.set(id, { resolve, reject, timer });
      this.channel.send({ t: "rls-fanout", id, method, request });
    });
  }

  private receive(message: ToWorker): void {
    switch (message.t) {
      case "rls-override-apply":
      case "rls-override-state":
        this.overrideListener?.(message);
        return;
      case "rls-override-failed":
        this.settleChange(
          message.id,
          undefined,
          new BackendError("memory", message.message),
        );
        return;
      case "rls-fanout-result": {
        const pending = this.fanouts.get(message.id);
        if (pending === undefined) return;
        this.fanouts.delete(message.id);
        clearTimeout(pending.timer);
        pending.resolve(message);
        return;
      }
      case "rls-fanout-call": {
        const handler = this.handlers.get(message.method);
        const reply = (answer: {
          response?: JsonValue;
          error?: string;
        }): void => {
          this.channel.send({
            t: "rls-fanout-reply",
            id: message.id,
            ...answer,
          });
        };
        if (handler === undefined) {
          reply({ error: `${message.method} is not served by this worker` });
          return;
        }
        handler(message.request).then(
          (response) => {
            reply({ response });
          },
          (err: unknown) => {
            reply({ error: err instanceof Error ? err.message : String(err) });
          },
        );
        return;
      }
    }
  }

  /** Logs a fanned-out call that some workers did not answer. */
  warnMissing(method: FanoutMethod, result: FanoutResult): void {
    if (result.missing > 0)
      this.logger.warn(
        { method, missing: result.missing },
        `${method}: ${String(result.missing)} worker(s) did not answer; the answer covers the others`,
      );
  }
}

/**
 * The memory override store of one worker of several: every change goes through the primary
 * (see the file header), so the workers hold the same overrides and audit log.
 */
export class ReplicatedOverrideStore implements OverrideStore {
  readonly kind = "memory";
  private readonly local: MemoryOverrideStore;
  private readonly group: WorkerGroup;
  private readonly logger: Logger;
  /** The last change applied (the primary's order). */
  private seq = 0;
  /** Changes received before the start's state, applied after it. */
  private early: ApplyMessage[] | undefined = [];
  private stateArrived: (() => void) | undefined;

  constructor(local: MemoryOverrideStore, group: WorkerGroup, logger: Logger) {
    this.local = local;
    this.group = group;
    this.logger = logger;
    group.overrideListener = (message) => {
      if (message.t === "rls-override-state") this.takeState(message);
      else if (this.early !== undefined) this.early.push(message);
      else this.apply(message);
    };
  }

  get table(): MemoryOverrideStore["table"] {
    return this.local.table;
  }

  set(record: OverrideRecord): Promise<OverrideRecord | undefined> {
    return this.group.change({ op: "set", record: overrideToJson(record) });
  }

  delete(
    domain: string,
    entries: readonly OverrideEntry[],
    actor: string,
    reason: string,
  ): Promise<OverrideRecord | undefined> {
    return this.group.change({
      op: "delete",
      domain,
      entries: entries.map((e) => ({ key: e.key, value: e.value })),
      actor,
      reason,
      timeMs: Date.now(),
    });
  }

  auditLog(domain: string | undefined, limit: number): Promise<AuditRecord[]> {
    return this.local.auditLog(domain, limit);
  }

  /** Takes the primary's overrides and audit log (5 s at most), then starts the local sweep. */
  async start(): Promise<void> {
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.logger.warn(
          "the worker group's primary did not send its overrides within 5 s; starting without them",
        );
        this.takeState({
          t: "rls-override-state",
          seq: 0,
          overrides: [],
          audit: [],
        });
        resolve();
      }, 5000);
      this.stateArrived = () => {
        clearTimeout(timer);
        resolve();
      };
      this.group.requestOverrideState();
    });
    await this.local.start();
  }

  close(): Promise<void> {
    return this.local.close();
  }

  private takeState(message: StateMessage): void {
    if (this.early === undefined) return; // a second state: already running
    const overrides: OverrideRecord[] = [];
    for (const json of message.overrides) {
      try {
        overrides.push(overrideFromJson(json));
      } catch (err) {
        this.logger.warn(
          { err, json },
          "skipping an override the primary sent that does not parse",
        );
      }
    }
    const skipped = this.local.importState({
      overrides,
      audit: message.audit.map(auditEntryFromJson),
    });
    for (const { record, error } of skipped)
      this.logger.warn(
        { err: error, domain: record.domain, entries: record.entries },
        "skipping an override whose limit does not compile",
      );
    this.seq = message.seq;
    const early = this.early;
    this.early = undefined;
    for (const change of early) if (change.seq > this.seq) this.apply(change);
    this.stateArrived?.();
  }

  private apply(message: ApplyMessage): void {
    if (message.seq <= this.seq) return;
    this.seq = message.seq;
    const { change } = message;
    let result: Promise<OverrideRecord | undefined>;
    try {
      result = applyOverrideChange(this.local, change);
    } catch (err) {
      // The primary applied it first, so this worker should too; say so if it cannot.
      this.logger.error(
        { err, change },
        "could not apply an override change the primary sent",
      );
      if (message.reply !== undefined)
        this.group.settleChange(
          message.reply,
          undefined,
          err instanceof Error ? err : new Error(String(err)),
        );
      return;
    }
    const reply = message.reply;
    if (reply !== undefined)
      void result.then((before) => {
        this.group.settleChange(reply, before);
      });
  }
}

/**
 * Serves the other workers' fanned-out calls of `method` with this worker's own part: the
 * request and the answer cross the channel as proto3 JSON.
 */
function serveLocally<I extends DescMessage, O extends DescMessage>(
  group: WorkerGroup,
  method: FanoutMethod,
  desc: { readonly input: I; readonly output: O },
  impl: (
    request: MessageShape<I>,
    context: HandlerContext,
  ) => Promise<MessageInitShape<O>> | MessageInitShape<O>,
): void {
  group.serve(method, async (json) => {
    const context = createHandlerContext({
      service: AdminService,
      method: AdminService.method[method],
      protocolName: "worker-ipc",
      requestMethod: "POST",
      url: `ipc:///${AdminService.typeName}/${method}`,
    });
    const answer = await impl(fromJson(desc.input, json), context);
    return toJson(desc.output, create(desc.output, answer));
  });
}

/** Runs `call` on this worker and the others, and merges the answers. */
async function acrossWorkers<O extends DescMessage>(
  group: WorkerGroup,
  method: FanoutMethod,
  output: O,
  request: JsonValue,
  local: () => Promise<MessageShape<O>>,
): Promise<MessageShape<O>[]> {
  const own = await local();
  let result: FanoutResult;
  try {
    result = await group.fanout(method, request);
  } catch (err) {
    throw new ConnectError(
      `${method} reached one worker of several, and the others are unreachable: ${err instanceof Error ? err.message : String(err)}`,
      Code.Unavailable,
    );
  }
  group.warnMissing(method, result);
  return [own, ...result.responses.map((json) => fromJson(output, json))];
}

/**
 * The admin parts of one worker of several: TopOffenders and the canary's calls answer for
 * the whole group (see the file header); the overrides part is unchanged (its store is a
 * {@link ReplicatedOverrideStore}). Also serves the other workers' fanned-out calls.
 *
 * @param topOffendersK - `TOP_OFFENDERS_K`, the offenders per rule a request with k 0 gets
 */
export function groupAdminParts(
  parts: AdminParts,
  group: WorkerGroup,
  topOffendersK: number,
): AdminParts {
  const out: { -readonly [K in keyof AdminParts]: AdminParts[K] } = {
    ...parts,
  };
  const { offenders, canary } = parts;
  if (offenders !== undefined) {
    serveLocally(
      group,
      "topOffenders",
      AdminService.method.topOffenders,
      (request, context) => offenders.topOffenders(request, context),
    );
    const grouped: OffendersAdmin = {
      async topOffenders(request, context) {
        const k =
          request.k === 0 || request.k > topOffendersK
            ? topOffendersK
            : request.k;
        const answers = await acrossWorkers(
          group,
          "topOffenders",
          TopOffendersResponseSchema,
          toJson(AdminService.method.topOffenders.input, request),
          async () =>
            create(
              TopOffendersResponseSchema,
              await offenders.topOffenders(request, context),
            ),
        );
        return mergeTopOffenders(answers, k);
      },
    };
    out.offenders = grouped;
  }
  if (canary !== undefined) {
    serveLocally(
      group,
      "startCanary",
      AdminService.method.startCanary,
      (request, context) => canary.startCanary(request, context),
    );
    serveLocally(
      group,
      "getCanaryReport",
      AdminService.method.getCanaryReport,
      (request, context) => canary.getCanaryReport(request, context),
    );
    serveLocally(
      group,
      "stopCanary",
      AdminService.method.stopCanary,
      (request, context) => canary.stopCanary(request, context),
    );
    const grouped: CanaryAdmin = {
      async startCanary(request, context) {
        const schema = AdminService.method.startCanary.output;
        const own = create(schema, await canary.startCanary(request, context));
        const result = await group
          .fanout(
            "startCanary",
            toJson(AdminService.method.startCanary.input, request),
          )
          .catch((err: unknown) => {
            throw new ConnectError(
              `the canary started on one worker of several, and the others are unreachable: ${err instanceof Error ? err.message : String(err)}`,
              Code.Unavailable,
            );
          });
        group.warnMissing("startCanary", result);
        return own;
      },
      async getCanaryReport(request, context) {
        const reports = await acrossWorkers(
          group,
          "getCanaryReport",
          GetCanaryReportResponseSchema,
          toJson(AdminService.method.getCanaryReport.input, request),
          async () =>
            create(
              GetCanaryReportResponseSchema,
              await canary.getCanaryReport(request, context),
            ),
        );
        return mergeCanaryReports(reports);
      },
      async stopCanary(request, context) {
        const answers = await acrossWorkers(
          group,
          "stopCanary",
          StopCanaryResponseSchema,
          toJson(AdminService.method.stopCanary.input, request),
          async () =>
            create(
              StopCanaryResponseSchema,
              await canary.stopCanary(request, context),
            ),
        );
        return create(StopCanaryResponseSchema, {
          report: mergeCanaryReports(
            answers.flatMap((a) => (a.report === undefined ? [] : [a.report])),
          ),
        });
      },
    };
    out.canary = grouped;
  }
  return out;
}
