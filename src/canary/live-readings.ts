// Pairs what the live pipeline read for a request (its `countObserver` call) with the same
// request's `DecisionObserver` call, which comes a few microtasks later, after `doLimit`
// resolves. Both are told in the order requests are decided, so the pair is almost always the
// oldest reading waiting: a queue, not a WeakMap (whose entries cost the garbage collector more
// than the whole pairing, measured with bench/canary.ts).

import type { RequestPlan } from "../limiter/request-plan.js";
import type { RateLimitResponse_DescriptorStatus } from "../proto.js";

/** What the live pipeline read for one request. */
export interface LiveReading {
  /** The statuses array `doLimit` resolved with (the request's identity). */
  readonly statuses: readonly RateLimitResponse_DescriptorStatus[];
  readonly plan: RequestPlan;
  /** False when all-or-nothing charging refused the request. */
  readonly charged: boolean;
}

/**
 * Readings waiting for their request's observer call, oldest first, in a ring of `maxWaiting`
 * slots (no array is resized per request: that costs more than the pairing). A reading whose
 * observer call never comes (the backend guard answered by the failure mode after the store's
 * late answer) is dropped once `maxWaiting` newer ones wait.
 *
 * @typeParam T - the reading, possibly with room for what the observer call adds
 */
export class LiveReadings<T extends LiveReading = LiveReading> {
  private readonly items: (T | undefined)[];
  private head = 0;
  private count = 0;

  /** @param maxWaiting - readings kept waiting at most (≥ 1) */
  constructor(maxWaiting = 1024) {
    this.items = new Array<T | undefined>(Math.max(1, maxWaiting)).fill(
      undefined,
    );
  }

  /** Number of readings waiting (slots taken out of order count until the ring passes them). */
  get size(): number {
    return this.count;
  }

  /** Adds the reading of a request just decided. */
  push(reading: T): void {
    const items = this.items;
    if (this.count === items.length) this.advance();
    items[(this.head + this.count) % items.length] = reading;
    this.count++;
  }

  /**
   * Takes the reading of the request that answered with `statuses`: the oldest waiting in the
   * usual case, else the first match further on (requests that finished out of order).
   */
  take(statuses: readonly RateLimitResponse_DescriptorStatus[]): T | undefined {
    const items = this.items;
    // Slots emptied out of order are passed over once they are the oldest.
    while (this.count > 0 && items[this.head] === undefined) this.advance();
    for (let j = 0; j < this.count; j++) {
      const at = (this.head + j) % items.length;
      const reading = items[at];
      if (reading?.statuses !== statuses) continue;
      if (j === 0) this.advance();
      else items[at] = undefined;
      return reading;
    }
    return undefined;
  }

  /** Drops the oldest slot. */
  private advance(): void {
    this.items[this.head] = undefined;
    this.head = (this.head + 1) % this.items.length;
    this.count--;
  }
}
