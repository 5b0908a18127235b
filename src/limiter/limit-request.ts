/**
 * One request after the decision rules, as one value: the domain, its descriptors and, per
 * descriptor, the limit the rules chose (the rule, or a run-time override; none where no rule
 * matched, the rule is unlimited or replaced) and the hits it adds. Built once per request
 * ({@link resolveRequest} for ShouldRateLimit) and read by every later step: the backend guard,
 * the pipeline, Explain, the canary and the subscribers of the request's `Decision`.
 */
import type {
  RateLimit,
  RateLimitConfig,
} from "../config/rate-limit-config.js";
import type { RateLimitDescriptor } from "../proto.js";
import type { OverrideLookup } from "./decision-hooks.js";
import { applyLimitRules } from "./decision-rules.js";
import { hitsAddendFor } from "./hits-addend.js";
import type { RequestPlan } from "./request-plan.js";

/** This module's way to the private constructor (set by the class's static block). */
let fromLists: (
  domain: string,
  descriptors: readonly RateLimitDescriptor[],
  limits: readonly (RateLimit | undefined)[],
  hitsAddends: readonly number[],
  unlimited: readonly boolean[] | undefined,
) => LimitRequest;

/** One descriptor of a {@link LimitRequest}, as given to {@link LimitRequest.of}. */
export interface LimitEntry {
  /** The request descriptor. */
  readonly descriptor: RateLimitDescriptor;
  /** The limit to count, or `undefined` for "not counted" (see {@link LimitRequest.limits}). */
  readonly limit: RateLimit | undefined;
  /** The hits it adds (≥ 0) or gives back (< 0); 0 when absent. */
  readonly hitsAddend?: number;
  /** Whether its rule is `unlimited` (answered with `limit_remaining` 4294967295). */
  readonly unlimited?: boolean;
}

/**
 * A request's domain, descriptors, limits and hits addends (see the file comment). The three
 * lists have one element per request descriptor, in request order; they are never written
 * after construction.
 */
export class LimitRequest {
  /** The request domain. */
  readonly domain: string;
  /** The request's descriptors. */
  readonly descriptors: readonly RateLimitDescriptor[];
  /**
   * Per descriptor, the limit to count (after overrides, `unlimited` and `replaces`), or
   * `undefined` for "not counted": such a descriptor is answered `{code: OK}` without a counter.
   */
  readonly limits: readonly (RateLimit | undefined)[];
  /** Per descriptor, the hits it adds (≥ 0), or gives back (< 0: `is_negative_hits`). */
  readonly hitsAddends: readonly number[];
  /**
   * Per descriptor, whether its rule is `unlimited` (answered with `limit_remaining`
   * 4294967295); `undefined` when no rule of the request is.
   */
  readonly unlimited: readonly boolean[] | undefined;
  /**
   * What the store counted: the request's plan, whose entries hold what the store read
   * (`current` and `previous`, after the entry's `increment` when the plan is `charged`, before
   * it otherwise; nothing for a local-cache hit; each token bucket's `decision`). Set by the
   * store's pipeline once it has built the request's statuses (never by the backend guard's
   * local limiters, which count copies: {@link LimitRequest.withLimits}); undefined while the
   * store has not answered, or when it never counted the request.
   */
  counted: RequestPlan | undefined = undefined;

  static {
    fromLists = (domain, descriptors, limits, hitsAddends, unlimited) =>
      new LimitRequest(domain, descriptors, limits, hitsAddends, unlimited);
  }

  /**
   * Only this module builds a request from lists (they are then one per descriptor, by
   * construction); elsewhere a request is built from entries ({@link LimitRequest.of}).
   */
  private constructor(
    domain: string,
    descriptors: readonly RateLimitDescriptor[],
    limits: readonly (RateLimit | undefined)[],
    hitsAddends: readonly number[],
    unlimited: readonly boolean[] | undefined,
  ) {
    this.domain = domain;
    this.descriptors = descriptors;
    this.limits = limits;
    this.hitsAddends = hitsAddends;
    this.unlimited = unlimited;
  }

  /**
   * A request from one entry per descriptor, in request order (Explain, the canary, tools).
   * An entry without `hitsAddend` adds 0 hits (a read-only request); without `unlimited`, its
   * rule is not unlimited.
   *
   * @param domain - the request domain
   * @param entries - per descriptor: the descriptor, the limit to count (`undefined`: not
   *   counted, answered `{code: OK}`), its hits and whether its rule is `unlimited`
   */
  static of(domain: string, entries: readonly LimitEntry[]): LimitRequest {
    const n = entries.length;
    const descriptors = new Array<RateLimitDescriptor>(n);
    const limits = new Array<RateLimit | undefined>(n);
    const hitsAddends = new Array<number>(n);
    let unlimited: boolean[] | undefined;
    for (let i = 0; i < n; i++) {
      const entry = entries[i]!;
      descriptors[i] = entry.descriptor;
      limits[i] = entry.limit;
      hitsAddends[i] = entry.hitsAddend ?? 0;
      if (entry.unlimited === true)
        (unlimited ??= new Array<boolean>(n).fill(false))[i] = true;
    }
    return new LimitRequest(
      domain,
      descriptors,
      limits,
      hitsAddends,
      unlimited,
    );
  }

  /**
   * The entry of descriptor `index` (the inverse of {@link LimitRequest.of}).
   *
   * @throws RangeError when `index` is not a descriptor's index
   */
  entry(index: number): LimitEntry {
    if (!Number.isInteger(index) || index < 0 || index >= this.size)
      throw new RangeError(
        `descriptor index ${String(index)} is outside 0..${String(this.size - 1)}`,
      );
    return {
      descriptor: this.descriptors[index]!,
      limit: this.limits[index],
      hitsAddend: this.hitsAddends[index]!,
      unlimited: this.unlimited?.[index] === true,
    };
  }

  /** Number of descriptors in the request. */
  get size(): number {
    return this.descriptors.length;
  }

  /**
   * The same request counted against other limits (the backend guard's local mode: scaled or
   * muted copies of each limit); `undefined` limits stay undefined. The copy has its own
   * {@link LimitRequest.counted}.
   *
   * @param map - the limit to count instead of each defined one
   */
  withLimits(map: (limit: RateLimit) => RateLimit): LimitRequest {
    const limits = this.limits;
    const n = limits.length;
    const mapped = new Array<RateLimit | undefined>(n);
    for (let i = 0; i < n; i++) {
      const limit = limits[i];
      mapped[i] = limit === undefined ? undefined : map(limit);
    }
    return new LimitRequest(
      this.domain,
      this.descriptors,
      mapped,
      this.hitsAddends,
      this.unlimited,
    );
  }
}

/**
 * Resolves one ShouldRateLimit request into a {@link LimitRequest}: looks up each descriptor
 * (`config.getLimit`, which counts `domain_not_found`), probes the run-time overrides where the
 * lookup found a limit, resolves its hits addend (`hitsAddendFor`), applies `unlimited` and
 * `replaces` (`applyLimitRules`), and counts the hits of unlimited rules in their `total_hits`
 * and `within_limit` (they never reach the backend; a deliberate difference,
 * docs/reference-parity.md#diff-unlimited-stats). Upstream `ratelimit.go`
 * `shouldRateLimitWorker`.
 *
 * @param requestHitsAddend - the request's `hits_addend` (0 means 1)
 * @param overrides - run-time overrides (admin API), probed where the lookup found a limit
 */
export function resolveRequest(
  config: RateLimitConfig,
  domain: string,
  descriptors: readonly RateLimitDescriptor[],
  requestHitsAddend: number,
  overrides?: OverrideLookup,
): LimitRequest {
  const n = descriptors.length;
  const limits = new Array<RateLimit | undefined>(n);
  const hitsAddends = new Array<number>(n);
  for (let i = 0; i < n; i++) {
    const descriptor = descriptors[i]!;
    let limit = config.getLimit(domain, descriptor);
    if (limit !== undefined && overrides !== undefined)
      limit = overrides.find(domain, descriptor, limit) ?? limit;
    const hits = hitsAddendFor(descriptor, requestHitsAddend);
    hitsAddends[i] = hits;
    limits[i] = limit;
    // A refund (negative hits) counts in no statistic.
    if (limit?.unlimited === true && hits >= 0) {
      limit.stats.totalHits.add(hits);
      limit.stats.withinLimit.add(hits);
    }
  }
  const unlimited = applyLimitRules(limits);
  return fromLists(domain, descriptors, limits, hitsAddends, unlimited);
}
