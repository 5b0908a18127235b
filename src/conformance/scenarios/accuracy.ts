// Accuracy against the ground truth the suite computes: bursts of concurrent calls on one
// server, and the same through several servers sharing one store. With a fixed window a call
// of h hits is admitted while the counter after it is at most the limit L, so exactly
// floor(L / h) calls of a burst are admitted, whatever their order, and the OK answers carry
// every remaining value L − h, L − 2h, … 0 once. More admitted means a lost or late increment;
// fewer, a double one. The spec lets the mc backend exceed under simultaneous requests: there
// an excess is reported as not supported, with the numbers. Over a store freeze (SIGSTOP) and
// thaw a server must answer again after the thaw; one that admits over the limit meanwhile
// (fail-open) is measured, reported as not supported with the numbers, not failed.
import {
  Mismatch,
  NotSupported,
  type CallOutcome,
  type CallRequest,
  type Scenario,
  type DescriptorConfig,
  type ScenarioContext,
  type Section,
  type UnitName,
  type Via,
} from "../model.js";
import { d, per, rule } from "./dsl.js";

interface BurstTally {
  admitted: number;
  refused: number;
  errors: string[];
  remaining: number[];
}

function tally(outcomes: readonly CallOutcome[], statusIndex = -1): BurstTally {
  const t: BurstTally = { admitted: 0, refused: 0, errors: [], remaining: [] };
  for (const o of outcomes) {
    if (o.kind === "error") {
      t.errors.push(o.error);
      continue;
    }
    const code =
      statusIndex < 0
        ? o.answer.overallCode
        : o.answer.statuses[statusIndex]?.code;
    if (code === "OK") {
      t.admitted++;
      const s = o.answer.statuses[statusIndex < 0 ? 0 : statusIndex];
      if (s !== undefined) t.remaining.push(s.limitRemaining);
    } else t.refused++;
  }
  return t;
}

/**
 * Checks a tally against the ground truth of `limit` hits at most (a fixed window's
 * requests_per_unit, a fresh token bucket's burst, the tightest of several limits) and `hits`
 * per call. Returns the measurement's text; throws a `Mismatch` when the tally is not exact
 * (a `NotSupported` on the mc backend, which the spec lets exceed).
 */
function check(
  ctx: ScenarioContext,
  what: string,
  request: unknown,
  t: BurstTally,
  calls: number,
  limit: number,
  hits: number,
): string {
  const admitted = Math.min(calls, Math.floor(limit / hits));
  const expectedRemaining = Array.from(
    { length: admitted },
    (_, i) => limit - (i + 1) * hits,
  ).sort((a, b) => a - b);
  const got = [...t.remaining].sort((a, b) => a - b);
  const note = `${what}: ${calls} concurrent calls of ${hits} hit${hits > 1 ? "s" : ""}, limit ${limit}: admitted ${t.admitted} (ground truth ${admitted}), refused ${t.refused}, errors ${t.errors.length}`;
  const exact =
    t.errors.length === 0 &&
    t.admitted === admitted &&
    JSON.stringify(got) === JSON.stringify(expectedRemaining);
  // The spec lets the memcached-protocol backend exceed a quota under simultaneous requests
  // (its increments are asynchronous): measured, not failed.
  if (!exact && ctx.backend === "mc" && t.errors.length === 0)
    throw new NotSupported(
      `exactness under simultaneous calls, which the spec does not ask of the mc backend (${note})`,
    );
  if (!exact)
    throw new Mismatch(
      request,
      { admitted, remaining: "each of L−h … 0 once" },
      {
        admitted: t.admitted,
        refused: t.refused,
        errors: t.errors.slice(0, 3),
        remaining: got.slice(0, 20),
      },
      note,
    );
  return note;
}

async function burst(
  ctx: ScenarioContext,
  calls: number,
  request: (i: number) => CallRequest,
  via: Via | "replicas" = "grpc",
): Promise<CallOutcome[]> {
  return Promise.all(
    Array.from({ length: calls }, (_, i) =>
      via === "replicas"
        ? ctx.callReplica(i, request(i))
        : ctx.call(request(i), via),
    ),
  );
}

/**
 * How a section's rule `k` limits: the descriptor config of a key-only rule `k` that admits
 * exactly `capacity` hits of a fresh key in one burst (the ground truth the suite computes).
 */
type LimitRule = (capacity: number) => DescriptorConfig;

/** The spec's fixed window: `capacity` per day. */
const fixedDay: LimitRule = (capacity) =>
  rule("k", undefined, per(capacity, "day"));

function single(
  id: string,
  title: string,
  calls: number,
  limit: number,
  hits: number,
  via: Via | "replicas" = "grpc",
  limitRule: LimitRule = fixedDay,
  spec = "What the service does 1; States (over when hits exceed requests_per_unit)",
): Scenario {
  return {
    id,
    title,
    spec,
    config: [limitRule(limit)],
    async run(ctx) {
      const value = ctx.unique("b");
      const request = {
        domain: ctx.domain,
        descriptors: [d(`k=${value}`)],
        ...(hits > 1 ? { hitsAddend: hits } : {}),
      };
      const outcomes = await burst(ctx, calls, () => request, via);
      ctx.note(check(ctx, id, request, tally(outcomes), calls, limit, hits));
    },
  };
}

const bursts: Scenario[] = [
  single("burst-100", "100 concurrent calls against a limit of 40", 100, 40, 1),
  single(
    "burst-300",
    "300 concurrent calls against a limit of 150",
    300,
    150,
    1,
  ),
  single("burst-hits", "60 concurrent calls of 3 hits against 90", 60, 90, 3),
  single(
    "burst-json",
    "50 concurrent /json calls against 20",
    50,
    20,
    1,
    "json",
  ),
  {
    id: "burst-two",
    title:
      "80 concurrent calls of two descriptors (30 and 50): each counted exactly",
    spec: "What the service does 1, 5",
    config: [
      rule("a", undefined, per(30, "day")),
      rule("b", undefined, per(50, "day")),
    ],
    async run(ctx) {
      const v = ctx.unique("t");
      const request = {
        domain: ctx.domain,
        descriptors: [d(`a=${v}`), d(`b=${v}`)],
      };
      const outcomes = await burst(ctx, 80, () => request);
      ctx.note(
        check(ctx, "burst-two a", request, tally(outcomes, 0), 80, 30, 1),
      );
      ctx.note(
        check(ctx, "burst-two b", request, tally(outcomes, 1), 80, 50, 1),
      );
    },
  },
  {
    id: "burst-keys",
    title: "20 keys × 10 concurrent calls against 5 each",
    spec: "What the service does 1; Matching rules 2",
    config: [rule("k", undefined, per(5, "day"))],
    async run(ctx) {
      const values = Array.from({ length: 20 }, () => ctx.unique("m"));
      const outcomes = await burst(ctx, 200, (i) => ({
        domain: ctx.domain,
        descriptors: [d(`k=${values[i % 20] ?? ""}`)],
      }));
      let admitted = 0;
      for (let key = 0; key < 20; key++) {
        const mine = outcomes.filter((_, i) => i % 20 === key);
        const t = tally(mine);
        check(ctx, `key ${key}`, { key: values[key] }, t, 10, 5, 1);
        admitted += t.admitted;
      }
      ctx.note(
        `burst-keys: 200 concurrent calls over 20 keys, limit 5 each: admitted ${admitted} (ground truth 100)`,
      );
    },
  },
];

const replicas: Scenario[] = [
  single(
    "replicas-120",
    "120 concurrent calls through 2 replicas against 50",
    120,
    50,
    1,
    "replicas",
  ),
  single(
    "replicas-hits",
    "60 concurrent calls of 2 hits through 2 replicas against 40",
    60,
    40,
    2,
    "replicas",
  ),
];

/**
 * The verdict of a freeze row whose server admitted over the limit, or whose store lost or
 * gained hits, while the store did not answer: a measurement (reported as not supported).
 */
export const freezeInexact =
  "exact counting while its store does not answer (measured, not failed)";

/** How long the store stays frozen, ms: well under a call's 5 s deadline. */
const freezeMs = 1_500;

/**
 * What the store holds after the thaw, read from the last call's answer: `limit` minus its
 * `limitRemaining`, when that call was admitted (an admitted call's remaining is exact; a
 * refused one's is 0 and says nothing). Undefined when the last call was not admitted.
 */
function heldAfter(
  last: CallOutcome | undefined,
  limit: number,
): number | undefined {
  if (last?.kind !== "answer" || last.answer.overallCode !== "OK")
    return undefined;
  const s = last.answer.statuses[0];
  return s === undefined ? undefined : limit - s.limitRemaining;
}

/** How long a server may take to answer again after the thaw, ms (a breaker's probe, a reconnect). */
const recoveryMs = 5_000;

/**
 * Waits until every replica answers a call on a key of its own (the measured key is left
 * alone), for at most `recoveryMs`. Returns the milliseconds waited: 0 when the first calls
 * answered.
 */
async function answersAgain(ctx: ScenarioContext): Promise<number> {
  const start = Date.now();
  const probe = {
    domain: ctx.domain,
    descriptors: [d(`k=${ctx.unique("r")}`)],
  };
  for (let replica = 0; replica < 2; replica++) {
    while (
      (await ctx.callReplica(replica, probe)).kind === "error" &&
      Date.now() - start < recoveryMs
    )
      await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const waited = Date.now() - start;
  return waited < 50 ? 0 : waited;
}

/**
 * Calls before a freeze, a burst while the store is frozen, the thaw, then calls after it.
 * While frozen a server may hold the calls until the thaw or answer errors; it must answer
 * again within `recoveryMs` of the thaw (else the row fails). Admitting more than the limit meanwhile
 * (fail-open) is measured, not failed: the row is then "not supported" with its numbers.
 * Without errors the admitted count must be exact. The measurement also says how many hits the store holds after
 * the thaw against the truth: the admitted calls' hits, plus at most one per call that
 * answered an error (a server may have counted it before the error).
 */
function frozen(
  id: string,
  title: string,
  limit: number,
  during: number,
  limitRule: LimitRule = fixedDay,
  spec = "What the service does 1, 4 (counters live in the backend)",
): Scenario {
  return {
    id,
    title,
    spec,
    config: [limitRule(limit)],
    async run(ctx) {
      const store = ctx.store;
      if (store === undefined)
        throw new NotSupported("no store of its own to freeze");
      const value = ctx.unique("f");
      const request = { domain: ctx.domain, descriptors: [d(`k=${value}`)] };
      const before = await burst(ctx, 5, () => request);
      store.freeze();
      let duringCalls: Promise<CallOutcome[]>;
      try {
        duringCalls = burst(ctx, during, () => request, "replicas");
        await new Promise((resolve) => setTimeout(resolve, freezeMs));
      } finally {
        store.thaw();
      }
      const held = await duringCalls;
      const recoveredMs = await answersAgain(ctx);
      const after: CallOutcome[] = [];
      for (let i = 0; i < 5; i++) after.push(await ctx.callReplica(i, request));
      const all = [...before, ...held, ...after];
      const t = tally(all);
      const afterErrors = tally(after).errors;
      const stored = heldAfter(after.at(-1), limit);
      const storedText =
        stored === undefined
          ? ""
          : `; the store holds ${stored} hits after the thaw (truth ${t.admitted}${t.errors.length > 0 ? ` to ${t.admitted + t.errors.length}` : ""})`;
      const note = `${id}: 5 calls, a ${freezeMs} ms store freeze with ${during} concurrent calls, the thaw${recoveredMs > 0 ? ` (every replica answering again within ${recoveredMs} ms)` : ""}, 5 calls; limit ${limit}: admitted ${t.admitted}, refused ${t.refused}, errors ${t.errors.length} (${tally(held).errors.length} while frozen)${storedText}`;
      const total = before.length + held.length + after.length;
      if (afterErrors.length > 0)
        throw new Mismatch(
          request,
          { admittedAtMost: limit, errorsAfterThaw: 0 },
          { admitted: t.admitted, errorsAfterThaw: afterErrors.slice(0, 3) },
          note,
        );
      // A server that admits while its store does not answer (fail-open) cannot be exact
      // over a freeze: the row is its measurement, not a failure.
      if (t.admitted > limit)
        throw new NotSupported(`${freezeInexact} (${note})`);
      const storeExact =
        stored === undefined ||
        (stored >= t.admitted && stored <= t.admitted + t.errors.length);
      let answersExact = true;
      if (t.errors.length === 0)
        try {
          check(ctx, id, request, t, total, limit, 1);
        } catch (error) {
          if (!(error instanceof Mismatch || error instanceof NotSupported))
            throw error;
          answersExact = false;
        }
      if (!storeExact || !answersExact)
        throw new NotSupported(
          `${freezeInexact} (${note}${answersExact ? "" : "; the remaining values are not each of L−1 … once"})`,
        );
      ctx.note(note);
    },
  };
}

const freezes: Scenario[] = [
  frozen(
    "freeze-burst",
    "a burst while the store is frozen: admitted against the limit, answers after the thaw",
    30,
    40,
  ),
  frozen(
    "freeze-under",
    "a burst under the limit while the store is frozen: all admitted after the thaw",
    100,
    20,
  ),
];

/** An algorithm beyond the spec whose accuracy the suite measures. */
interface Algorithm {
  /** Its name in section titles. */
  readonly name: string;
  /** The spec reference of its scenarios. */
  readonly spec: string;
  readonly limitRule: LimitRule;
  /**
   * Units of the window the section's sequential probe expects in `current_limit`, or
   * undefined when it is not checked (a token bucket's `current_limit` is its rate).
   */
  readonly probeLimit?: readonly [
    requestsPerUnit: (capacity: number) => number,
    unit: UnitName,
  ];
}

const algorithms: readonly Algorithm[] = [
  {
    name: "sliding windows",
    spec: "beyond the spec: sliding windows (a fresh key's weighted count is its own)",
    limitRule: (capacity) =>
      rule(
        "k",
        undefined,
        per(capacity, "day", { algorithm: "sliding_window" }),
      ),
    probeLimit: [(c) => c, "DAY"],
  },
  {
    // One hit a day refills: nothing comes back during a burst of a few seconds.
    name: "token buckets",
    spec: "beyond the spec: token buckets (a full bucket admits its burst)",
    limitRule: (capacity) =>
      rule(
        "k",
        undefined,
        per(1, "day", { algorithm: "token_bucket", burst: capacity }),
      ),
  },
  {
    name: "calendar windows",
    spec: "beyond the spec: calendar windows (a UTC month)",
    limitRule: (capacity) =>
      rule("k", undefined, per(capacity, "month", { time_zone: "UTC" })),
    probeLimit: [(c) => c, "MONTH"],
  },
  {
    // The tighter limit second: a server that reads only the first admits 20 more.
    name: "several limits",
    spec: "beyond the spec: several limits per descriptor (the tightest decides)",
    limitRule: (capacity) => ({
      key: "k",
      rate_limits: [per(capacity + 20, "day"), per(capacity, "hour")],
    }),
    probeLimit: [(c) => c, "HOUR"],
  },
];

/**
 * The feature probe of an algorithm's accuracy section: one fresh key counted down, one call
 * at a time, to 0 and then refused. A server without the feature refuses the config or counts
 * otherwise: the section is then "not supported".
 */
function probe(a: Algorithm, via: "client" | "replicas"): Scenario {
  const capacity = 3;
  const limit =
    a.probeLimit === undefined
      ? undefined
      : ({
          requestsPerUnit: a.probeLimit[0](capacity),
          unit: a.probeLimit[1],
        } as const);
  return {
    id: "probe",
    title: `${a.name}: ${capacity} calls one after the other count down to 0, the next is refused${via === "replicas" ? " (alternating replicas)" : ""}`,
    spec: a.spec,
    config: [a.limitRule(capacity)],
    async run(ctx) {
      const request = {
        domain: ctx.domain,
        descriptors: [d(`k=${ctx.unique("p")}`)],
      };
      for (let i = 0; i <= capacity; i++) {
        const outcome = await ctx.callReplica(
          via === "replicas" ? i : 0,
          request,
        );
        const s =
          outcome.kind === "answer" ? outcome.answer.statuses[0] : undefined;
        const admit = i < capacity;
        const expected = {
          code: admit ? "OK" : "OVER_LIMIT",
          limitRemaining: admit ? capacity - 1 - i : 0,
          ...(limit !== undefined ? { currentLimit: limit } : {}),
        };
        const good =
          s?.code === expected.code &&
          s.limitRemaining === expected.limitRemaining &&
          (limit === undefined ||
            (s.currentLimit?.requestsPerUnit === limit.requestsPerUnit &&
              s.currentLimit.unit === limit.unit));
        if (!good)
          throw new Mismatch(
            request,
            expected,
            outcome.kind === "answer" ? outcome.answer : outcome,
            `call ${i + 1} of ${capacity + 1}`,
          );
      }
    },
  };
}

/** Per algorithm: bursts on one server, then through 2 replicas on one store with a freeze. */
function algorithmSections(a: Algorithm): Section[] {
  return [
    {
      name: `accuracy under bursts: ${a.name}`,
      beyondSpec: true,
      scenarios: [
        probe(a, "client"),
        single(
          "burst-100",
          "100 concurrent calls against 40",
          100,
          40,
          1,
          "grpc",
          a.limitRule,
          a.spec,
        ),
        single(
          "burst-hits",
          "60 concurrent calls of 3 hits against 90",
          60,
          90,
          3,
          "grpc",
          a.limitRule,
          a.spec,
        ),
      ],
    },
    {
      name: `accuracy across replicas and a freeze: ${a.name}`,
      beyondSpec: true,
      replicas: 2,
      ownStore: true,
      scenarios: [
        probe(a, "replicas"),
        single(
          "replicas-120",
          "120 concurrent calls through 2 replicas against 50",
          120,
          50,
          1,
          "replicas",
          a.limitRule,
          a.spec,
        ),
        frozen(
          "freeze-burst",
          "a burst through 2 replicas while the store is frozen: admitted against the limit",
          30,
          40,
          a.limitRule,
          a.spec,
        ),
        frozen(
          "freeze-under",
          "a burst under the limit through 2 replicas while the store is frozen: every hit counted once",
          100,
          20,
          a.limitRule,
          a.spec,
        ),
      ],
    },
  ];
}

/** The accuracy sections: the spec's fixed windows, then each algorithm beyond it. */
export const accuracySections: readonly Section[] = [
  { name: "accuracy under bursts", scenarios: bursts },
  { name: "accuracy across replicas", replicas: 2, scenarios: replicas },
  { name: "accuracy over a store freeze", ownStore: true, scenarios: freezes },
];

/** The accuracy sections of the algorithms beyond the spec (reported with the extensions). */
export const accuracyBeyondSections: readonly Section[] =
  algorithms.flatMap(algorithmSections);
