// The counter backend the canary's candidate pipeline runs on: the live counters read-only for
// the cache keys the live decision of the same request used, the canary's own counters (its
// ledger, or for kv the store under keys of their own) for every other key. The candidate
// pipeline is the live `RateLimitPipeline` code, so every decision rule is the live one; only
// where its counts come from differs.

import {
  gcraDecide,
  type GcraDecision,
  type GcraParams,
} from "../limiter/gcra.js";
import type {
  BucketSlot,
  CacheKeyRules,
  CounterBackend,
  CounterSlot,
} from "../limiter/counter-backend.js";
import type { RequestPlan } from "../limiter/request-plan.js";
import type { CanaryLedger, LedgerEntry } from "./canary-ledger.js";
import { noLiveCounters, type LiveCounter } from "./live-counters.js";

/** Options of {@link CanaryCounterBackend}. */
export interface CanaryCounterBackendOptions {
  /** The canary's in-process counters (extras over shared keys; candidate-only counters). */
  readonly ledger: CanaryLedger;
  /**
   * Where candidate-only counters live instead of the ledger: the live kv store under keys of
   * their own ({@link suffixedCounterBackend}), so replicas running the same canary add up.
   * Undefined (memory and mc backends): in the ledger, in process.
   */
  readonly remote?: CounterBackend;
  /**
   * Whether two slots of one charge with the same cache key see each other's hits, as the live
   * store does: memory and kv increment in slot order; mc reads every counter first, so a slot
   * sees the value before the charge plus its own hits. @defaultValue true
   */
  readonly sameKeyAccumulates?: boolean;
}

/**
 * A {@link CounterBackend} over the live counters of one request and the canary's own. Before
 * each candidate decision the evaluator binds the request's plan to the live counters of the
 * same request ({@link CanaryCounterBackend.bind}); then, per slot:
 *
 * - **shared**: the live decision used the same cache key (same window length; for a token
 *   bucket the key names the rate and burst): the slot reads the candidate's count of it (the
 *   live count before the request plus the ledger's extra, set by the canary) and the
 *   candidate's charges move that private copy, which dies with the request. The live store is
 *   never written and its counters are never charged twice.
 * - **candidate-only** (a new rule, a changed window, unit or algorithm, a key the live
 *   decision did not use in this request): the ledger's count of the key (the live count last
 *   seen plus the extra), charged in the ledger; or, with a remote store, that store's.
 *
 * In process, evaluations run one at a time: the live counters bound last are the ones of
 * every slot. With a remote store slots of several requests may be in flight at once: each
 * slot then finds its request's live counters through the plan it belongs to (a WeakMap, kept
 * off the in-process path: its entries cost the garbage collector more than the lookups).
 */
export class CanaryCounterBackend implements CounterBackend {
  readonly inProcess: boolean;
  readonly cacheKeyRules?: CacheKeyRules;
  private readonly ledger: CanaryLedger;
  private readonly remote: CounterBackend | undefined;
  private readonly accumulates: boolean;
  /** With a remote store: each plan entry's live counters (the request it belongs to). */
  private readonly bound = new WeakMap<
    object,
    ReadonlyMap<string, LiveCounter>
  >();
  /** In process: the live counters of the request being decided. */
  private current: ReadonlyMap<string, LiveCounter> = noLiveCounters;

  constructor(options: CanaryCounterBackendOptions) {
    this.ledger = options.ledger;
    this.remote = options.remote;
    this.accumulates = options.sameKeyAccumulates ?? true;
    this.inProcess = options.remote === undefined;
    const rules = options.remote?.cacheKeyRules;
    if (rules !== undefined) this.cacheKeyRules = rules;
  }

  /**
   * Binds every entry of a candidate plan to the live counters of its request, and marks the
   * shared keys the plan uses (even those the candidate's local cache answers: it charges them
   * nothing); called once per plan, before any of its slots reaches this backend.
   */
  bind(plan: RequestPlan, live: ReadonlyMap<string, LiveCounter>): void {
    const remote = this.remote !== undefined;
    if (!remote) this.current = live;
    for (const entries of [plan.counted, plan.buckets, plan.refunds]) {
      for (const d of entries) {
        if (remote) this.bound.set(d, live);
        const shared = live.get(d.cacheKey);
        // Shared only as `sharedCounter` and `sharedBucket` decide: a window of another
        // length can have the same key at its boundaries (a minute's and a second's window
        // both start at a multiple of 60), and is the candidate's own counter.
        if (
          shared !== undefined &&
          (d.tokenBucket === undefined
            ? !shared.bucket && shared.windowSeconds === d.windowSeconds
            : shared.bucket)
        )
          shared.used = true;
      }
    }
  }

  /** The live counters a slot's request bound. */
  private liveOf(slot: object): ReadonlyMap<string, LiveCounter> | undefined {
    return this.remote === undefined ? this.current : this.bound.get(slot);
  }

  increment(
    slots: readonly CounterSlot[],
    nowSeconds: number,
  ): void | Promise<void> {
    let own: CounterSlot[] | undefined;
    // Without accumulation (mc) each slot answers the value before this charge plus its own hits.
    const before = this.accumulates ? undefined : this.valuesBefore(slots);
    for (let i = 0; i < slots.length; i++) {
      const slot = slots[i];
      if (slot === undefined) continue;
      const live = this.sharedCounter(slot);
      if (live !== undefined) {
        live.value += slot.increment;
        slot.current =
          before === undefined ? live.value : (before[i] ?? 0) + slot.increment;
        slot.previous = live.previous;
      } else if (this.remote !== undefined) (own ??= []).push(slot);
      else {
        const entry = this.ledgerEntry(slot);
        entry.extra += slot.increment;
        slot.current =
          before === undefined
            ? Math.max(0, entry.seen + entry.extra)
            : (before[i] ?? 0) + slot.increment;
        slot.previous = this.ledger.count(slot.previousCacheKey);
      }
    }
    return own === undefined
      ? undefined
      : this.remote?.increment(
          own.length === slots.length ? slots : own,
          nowSeconds,
        );
  }

  peek(slots: readonly CounterSlot[]): void | Promise<void> {
    let own: CounterSlot[] | undefined;
    for (const slot of slots) {
      const live = this.sharedCounter(slot);
      if (live !== undefined) {
        slot.current = live.value;
        slot.previous = live.previous;
      } else if (this.remote !== undefined) (own ??= []).push(slot);
      else {
        slot.current = this.ledger.count(slot.cacheKey);
        slot.previous = this.ledger.count(slot.previousCacheKey);
      }
    }
    return own === undefined
      ? undefined
      : this.remote?.peek(own.length === slots.length ? slots : own);
  }

  add(slots: readonly CounterSlot[], nowSeconds: number): void | Promise<void> {
    let own: CounterSlot[] | undefined;
    for (const slot of slots) {
      const live = this.sharedCounter(slot);
      if (live !== undefined) {
        // As every store does: a negative increment never takes a counter below 0.
        live.value = Math.max(0, live.value + slot.increment);
        slot.current = live.value;
      } else if (this.remote !== undefined) (own ??= []).push(slot);
      else if (slot.increment >= 0) {
        const entry = this.ledgerEntry(slot);
        entry.extra += slot.increment;
        slot.current = Math.max(0, entry.seen + entry.extra);
      } else {
        // Never below 0, and a missing counter stays missing.
        const entry = this.ledger.get(slot.cacheKey);
        if (entry === undefined) slot.current = 0;
        else {
          const after = Math.max(0, entry.seen + entry.extra + slot.increment);
          entry.extra = after - entry.seen;
          slot.current = after;
        }
      }
    }
    return own === undefined
      ? undefined
      : this.remote?.add(own.length === slots.length ? slots : own, nowSeconds);
  }

  /**
   * The remote store's atomic all-or-nothing charge when every slot is candidate-only;
   * otherwise undefined: the pipeline's check-then-increment, atomic here for shared keys
   * (their copies belong to one request) and for the ledger (in process, evaluations in turn).
   */
  chargeAllOrNothing(
    slots: readonly CounterSlot[],
    nowSeconds: number,
    fits: (slots: readonly CounterSlot[]) => boolean,
  ): boolean | Promise<boolean> | undefined {
    const remote = this.remote;
    if (remote?.chargeAllOrNothing === undefined) return undefined;
    for (const slot of slots)
      if (this.sharedCounter(slot) !== undefined) return undefined;
    return remote.chargeAllOrNothing(slots, nowSeconds, fits);
  }

  takeTokens(
    slots: readonly BucketSlot[],
    nowUs: number,
  ): void | Promise<void> {
    let own: BucketSlot[] | undefined;
    for (const slot of slots) {
      const params = slot.tokenBucket;
      if (params === undefined) continue;
      const live = this.sharedBucket(slot);
      if (live !== undefined)
        slot.decision = takeShared(live, params, slot.increment, nowUs);
      else if (this.remote !== undefined) (own ??= []).push(slot);
      else
        slot.decision = this.ledger.takeTokens(
          slot.cacheKey,
          params,
          slot.increment,
          nowUs,
        );
    }
    return own === undefined
      ? undefined
      : this.remote?.takeTokens(
          own.length === slots.length ? slots : own,
          nowUs,
        );
  }

  flush(): Promise<void> {
    return Promise.resolve();
  }

  /** Nothing to release: the ledger is the canary's, a remote store the live backend's. */
  close(): Promise<void> {
    return Promise.resolve();
  }

  /** Each slot's counter before a charge (the candidate's count; 0 for a remote store's). */
  private valuesBefore(slots: readonly CounterSlot[]): number[] {
    return slots.map((slot) => {
      const live = this.sharedCounter(slot);
      if (live !== undefined) return live.value;
      return this.remote === undefined ? this.ledger.count(slot.cacheKey) : 0;
    });
  }

  /** The live window counter a slot shares (marked used), or undefined when it is candidate-only. */
  private sharedCounter(slot: CounterSlot): LiveCounter | undefined {
    const live = this.liveOf(slot)?.get(slot.cacheKey);
    if (
      live === undefined ||
      live.bucket ||
      live.windowSeconds !== slot.windowSeconds
    )
      return undefined;
    live.used = true;
    return live;
  }

  /** The live token bucket a slot shares, or undefined when it is candidate-only. */
  private sharedBucket(slot: BucketSlot): LiveCounter | undefined {
    const live = this.liveOf(slot)?.get(slot.cacheKey);
    if (live?.bucket !== true) return undefined;
    live.used = true;
    return live;
  }

  /** The ledger entry of a candidate-only window counter, created with its window's expiry. */
  private ledgerEntry(slot: CounterSlot): LedgerEntry {
    return this.ledger.entry(
      slot.cacheKey,
      slot.sliding
        ? slot.windowEndSeconds + slot.windowSeconds
        : slot.windowEndSeconds,
    );
  }
}

/** One GCRA step on the private copy of a shared bucket. */
function takeShared(
  live: LiveCounter,
  params: GcraParams,
  hits: number,
  nowUs: number,
): GcraDecision {
  const decision = gcraDecide(live.tatUs, nowUs, hits, params);
  if (decision.newTatUs !== undefined) live.tatUs = decision.newTatUs;
  return decision;
}

/**
 * Wraps a counter backend so every cache key it stores gets `suffix` appended: the canary's
 * candidate-only counters in the live kv store, apart from every live key (a live key ends
 * with a window start, a `_w`/`_s`/`tb…` suffix or a calendar period, never with `suffix`).
 * Each call copies the slots under the new keys and copies the results back.
 */
export function suffixedCounterBackend(
  backend: CounterBackend,
  suffix: string,
): CounterBackend {
  const counterCopies = (slots: readonly CounterSlot[]): CounterSlot[] =>
    slots.map((slot) => ({
      cacheKey: slot.cacheKey + suffix,
      previousCacheKey:
        slot.previousCacheKey === undefined
          ? undefined
          : slot.previousCacheKey + suffix,
      perSecond: slot.perSecond,
      expirationSeconds: slot.expirationSeconds,
      windowSeconds: slot.windowSeconds,
      windowEndSeconds: slot.windowEndSeconds,
      sliding: slot.sliding,
      requestsPerUnit: slot.requestsPerUnit,
      shadowMode: slot.shadowMode,
      increment: slot.increment,
      current: slot.current,
      previous: slot.previous,
    }));
  const copyBack = (
    slots: readonly CounterSlot[],
    copies: readonly CounterSlot[],
  ): void => {
    for (let i = 0; i < slots.length; i++) {
      const slot = slots[i];
      const copy = copies[i];
      if (slot === undefined || copy === undefined) continue;
      slot.current = copy.current;
      slot.previous = copy.previous;
      slot.increment = copy.increment;
    }
  };
  const counters =
    (
      call: (copies: CounterSlot[], nowSeconds: number) => void | Promise<void>,
    ) =>
    (
      slots: readonly CounterSlot[],
      nowSeconds: number,
    ): void | Promise<void> => {
      const copies = counterCopies(slots);
      const done = call(copies, nowSeconds);
      if (done === undefined) {
        copyBack(slots, copies);
        return undefined;
      }
      return done.then(() => {
        copyBack(slots, copies);
      });
    };
  const atomic = backend.chargeAllOrNothing?.bind(backend);
  return {
    ...(backend.inProcess !== undefined
      ? { inProcess: backend.inProcess }
      : {}),
    ...(backend.cacheKeyRules !== undefined
      ? { cacheKeyRules: backend.cacheKeyRules }
      : {}),
    increment: counters((copies, now) => backend.increment(copies, now)),
    peek: (slots) => counters((copies) => backend.peek(copies))(slots, 0),
    add: counters((copies, now) => backend.add(copies, now)),
    ...(atomic !== undefined
      ? {
          chargeAllOrNothing(slots, nowSeconds, fits) {
            const copies = counterCopies(slots);
            // A store that checks in process (memory) asks `fits` about the values it read
            // into the copies: the caller's slots get them first.
            const charged = atomic(copies, nowSeconds, () => {
              copyBack(slots, copies);
              return fits(slots);
            });
            if (charged === undefined || typeof charged === "boolean") {
              copyBack(slots, copies);
              return charged;
            }
            return charged.then((value) => {
              copyBack(slots, copies);
              return value;
            });
          },
        }
      : {}),
    takeTokens(slots, nowUs) {
      const copies: BucketSlot[] = slots.map((slot) => ({
        cacheKey: slot.cacheKey + suffix,
        perSecond: slot.perSecond,
        tokenBucket: slot.tokenBucket,
        increment: slot.increment,
        decision: slot.decision,
      }));
      const back = (): void => {
        for (let i = 0; i < slots.length; i++) {
          const slot = slots[i];
          const copy = copies[i];
          if (slot !== undefined && copy !== undefined)
            slot.decision = copy.decision;
        }
      };
      const done = backend.takeTokens(copies, nowUs);
      if (done === undefined) {
        back();
        return undefined;
      }
      return done.then(back);
    },
    flush: () => backend.flush(),
    close: () => backend.close(),
  };
}
