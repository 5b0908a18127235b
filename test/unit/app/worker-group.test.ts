import { create } from "@bufbuild/protobuf";
import { silentLogger } from "../../helpers/silent-logger.js";
import { describe, expect, it, vi } from "vitest";
import type { AdminParts } from "../../../src/admin/admin-routes.js";
import {
  groupAdminParts,
  ReplicatedOverrideStore,
  WorkerGroup,
} from "../../../src/app/worker-group.js";
import type { ToPrimary, ToWorker } from "../../../src/app/worker-messages.js";
import { WorkerRelay } from "../../../src/app/worker-relay.js";
import { MemoryOverrideStore } from "../../../src/overrides/override-store.js";
import {
  OverrideTable,
  type OverrideRecord,
} from "../../../src/overrides/override-table.js";
import {
  OverrideLimitSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
  TopOffendersRequestSchema,
  TopOffendersResponseSchema,
  AdminService,
} from "../../../src/proto.js";
import { createHandlerContext } from "@connectrpc/connect";
import { FakeClock } from "../../helpers/fake-clock.js";

const logger = silentLogger();
const clock = new FakeClock(1_800_000_000);

/** Lets every message in flight (each delivered on its own macrotask, as IPC does) arrive. */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
}

interface Worker {
  readonly id: number;
  readonly group: WorkerGroup;
  readonly store: ReplicatedOverrideStore;
  /** Stops delivering messages to this worker (a hung or dead process). */
  deaf: boolean;
  /** Its admin parts as the group serves them. */
  admin: AdminParts;
}

function harness(timeoutMs = 200) {
  const relay = new WorkerRelay({
    logger,
    overrides: true,
    auditLogMax: 10,
    timeoutMs,
    clock,
  });
  let nextId = 1;
  const join = (parts?: AdminParts): Worker => {
    const id = nextId++;
    const listeners: ((m: ToWorker) => void)[] = [];
    const relayWorker = {
      id,
      send(message: ToWorker) {
        setImmediate(() => {
          if (!worker.deaf) for (const l of listeners) l(message);
        });
      },
    };
    const group = new WorkerGroup({
      channel: {
        send(message: ToPrimary) {
          setImmediate(() => {
            relay.receive(relayWorker, message);
          });
        },
        onMessage(listener) {
          listeners.push(listener);
        },
      },
      logger,
      timeoutMs,
    });
    const local = new MemoryOverrideStore({
      table: new OverrideTable({ clock }),
      clock,
      logger,
      auditLogMax: 10,
    });
    const worker: Worker = {
      id,
      group,
      store: new ReplicatedOverrideStore(local, group, logger),
      deaf: false,
      admin: groupAdminParts(parts ?? {}, group, 5),
    };
    return worker;
  };
  return { relay, join };
}

function record(
  value: string,
  requestsPerUnit: number,
  actor: string,
): OverrideRecord {
  return {
    domain: "api",
    entries: [{ key: "tenant", value }],
    limit: create(OverrideLimitSchema, { requestsPerUnit, unit: Unit.MINUTE }),
    expireMs: undefined,
    reason: "",
    actor,
    updateMs: clock.nowMs(),
  };
}

const held = (w: Worker): string[] =>
  w.store.table
    .list(undefined, clock.nowMs())
    .map(
      (r) =>
        `${r.entries[0]?.value ?? ""}=${String(r.limit.requestsPerUnit)} by ${r.actor}`,
    );

describe("overrides across workers", () => {
  it("applies concurrent changes from two workers in one order everywhere", async () => {
    const { join } = harness();
    const a = join();
    const b = join();
    await Promise.all([a.store.start(), b.store.start()]);
    const answers = await Promise.all([
      a.store.set(record("acme", 1, "a")),
      b.store.set(record("acme", 2, "b")),
      a.store.set(record("globex", 3, "a")),
      b.store.delete("api", [{ key: "tenant", value: "globex" }], "b", "gone"),
    ]);
    await settle();
    expect(held(a)).toEqual(held(b));
    expect(held(a)).toHaveLength(1);
    // Each answer is what its change replaced, in the primary's one order.
    expect(answers[0]).toBeUndefined();
    expect(answers[1]?.actor).toBe("a");
    expect(answers[3]?.limit.requestsPerUnit).toBe(3);
    const logA = await a.store.auditLog(undefined, 10);
    const logB = await b.store.auditLog(undefined, 10);
    expect(logA.map((r) => `${r.action} ${r.actor}`)).toEqual(
      logB.map((r) => `${r.action} ${r.actor}`),
    );
    expect(logA).toHaveLength(4);
  });

  it("gives a worker that starts later the overrides and audit log, then the new changes", async () => {
    const { join } = harness();
    const a = join();
    await a.store.start();
    await a.store.set(record("acme", 5, "alice"));
    await a.store.set(record("initech", 6, "alice"));
    const late = join();
    await late.store.start();
    expect(held(late)).toEqual(held(a));
    expect((await late.store.auditLog("api", 10)).map((r) => r.action)).toEqual(
      ["set", "set"],
    );
    await late.store.delete(
      "api",
      [{ key: "tenant", value: "acme" }],
      "bob",
      "",
    );
    await settle();
    expect(held(a)).toEqual(["initech=6 by alice"]);
    expect(held(late)).toEqual(held(a));
  });

  it("answers a change UNAVAILABLE when the primary does not answer", async () => {
    const { join } = harness(50);
    const a = join();
    await a.store.start();
    a.deaf = true;
    await expect(a.store.set(record("acme", 1, "a"))).rejects.toThrow(
      /did not answer within 50 ms/,
    );
  });
});

describe("fanned-out admin calls", () => {
  const request = create(TopOffendersRequestSchema, { domain: "api" });
  const context = createHandlerContext({
    service: AdminService,
    method: AdminService.method.topOffenders,
    protocolName: "test",
    requestMethod: "POST",
    url: "http://localhost/",
  });
  /** Offenders admin answering one rule with the given `tenant=<value>` hits. */
  const offenders = (hits: Record<string, number>): AdminParts => ({
    offenders: {
      topOffenders: () =>
        create(TopOffendersResponseSchema, {
          rules: [
            {
              rule: "api.tenant",
              domain: "api",
              hits: BigInt(Object.values(hits).reduce((x, y) => x + y, 0)),
              counters: 100,
              offenders: Object.entries(hits)
                .sort(([, x], [, y]) => y - x)
                .map(([value, n]) => ({
                  descriptor: `tenant=${value}`,
                  hits: BigInt(n),
                  overLimit: 0n,
                  error: 0n,
                })),
            },
          ],
        }),
    },
  });

  it("merges TopOffenders of every worker, and says nothing is missing when all answer", async () => {
    const { join } = harness();
    const a = join(offenders({ acme: 5, globex: 1 }));
    join(offenders({ acme: 2, initech: 4 }));
    join(offenders({ globex: 3 }));
    await settle();
    const answer = await a.admin.offenders?.topOffenders(request, context);
    const rule = create(TopOffendersResponseSchema, answer).rules[0];
    expect(rule?.hits).toBe(6n + 6n + 3n);
    expect(
      rule?.offenders.map((o) => `${o.descriptor}:${String(o.hits)}`),
    ).toEqual(["tenant=acme:7", "tenant=globex:4", "tenant=initech:4"]);
  });

  it("answers with the workers that did answer when one is hung", async () => {
    const { join } = harness(50);
    const a = join(offenders({ acme: 5 }));
    const b = join(offenders({ acme: 2 }));
    await settle();
    b.deaf = true;
    // Fake timeouts (setImmediate, which carries the messages, stays real): the answer waits
    // for the 50 ms fan-out timeout, not a moment less.
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      let answered = false;
      const pending = Promise.resolve(
        a.admin.offenders?.topOffenders(request, context),
      ).then((answer) => {
        answered = true;
        return answer;
      });
      await settle();
      await vi.advanceTimersByTimeAsync(49);
      await settle();
      expect(answered).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      const answer = await pending;
      expect(answered).toBe(true);
      expect(create(TopOffendersResponseSchema, answer).rules[0]?.hits).toBe(
        5n,
      );
    } finally {
      vi.useRealTimers();
    }
  });

  it("relays a call to no one when the worker is alone", async () => {
    const { join } = harness();
    const a = join();
    await settle();
    const result = await a.group.fanout("getCanaryReport", {});
    expect(result).toMatchObject({ responses: [], missing: 0 });
  });
});
