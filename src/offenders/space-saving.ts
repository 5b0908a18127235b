/* eslint-disable @typescript-eslint/no-non-null-assertion -- slots and heap positions index
   typed arrays within their fixed capacity on the decision path; a check per access would only
   cost (eslint.config.js exempts limiter/ and service/ for the same reason). */
// The heavy-hitters sketch behind top offenders (docs/operations.md#top-offenders): weighted
// Space-Saving (Metwally, Agrawal, El Abbadi, "Efficient Computation of Frequent and Top-k
// Elements in Data Streams", ICDT 2005) with a second counter per slot for refused hits.
//
// Why our own code: the one maintained npm package with a top-k sketch (bloom-filters'
// TopK) is a Count-Min sketch hashed with a pure-JS xxhash plus a sorted array, with no
// per-item error bound, no second counter and eight runtime dependencies; this runs on every
// decision, so it is a few typed arrays, one Map and a binary min-heap.

/** Slots allocated by a new sketch before it grows. */
const initialSlots = 16;

/** One monitored item of a {@link SpaceSaving} sketch, as {@link SpaceSaving.forEach} reports it. */
export interface SketchEntry {
  /** The item (a descriptor as `k=v,k2=v2`). */
  readonly item: string;
  /** Estimated hits: the true count ≤ `count` ≤ the true count + `error`. */
  readonly count: number;
  /** Estimated refused hits, with the same bound as `count`. */
  readonly overLimit: number;
  /** Most `count` (and `overLimit`) may exceed the true count by; ≤ `total / capacity`. */
  readonly error: number;
}

/**
 * A weighted Space-Saving sketch of `capacity` counters: it keeps the heaviest items of a
 * stream in fixed memory, each with an overestimate of its weight.
 *
 * Guarantees, with `N` = {@link SpaceSaving.total} (the sum of the weights added) and
 * `m` = `capacity`:
 * - an item's estimate is at least its true weight and at most its true weight plus its
 *   `error`, and `error` ≤ `N / m` (the smallest counter never exceeds `N / m`, since the `m`
 *   counters add up to `N`);
 * - every item whose true weight exceeds `N / m` is monitored;
 * - an item that is not monitored has a true weight of at most {@link SpaceSaving.minCount}
 *   (0 while the sketch is not full).
 *
 * An add costs one Map probe (none for the item added last) and a sift of the slot through the binary min-heap of counts:
 * O(log m), and O(1) for the heavy items, which sit at the bottom. A new item takes the
 * slot of the lightest one (the heap's root) and inherits its count as its error.
 */
export class SpaceSaving {
  /** Counters kept (`m`). */
  readonly capacity: number;
  /** Slot of each monitored item. */
  private readonly slots = new Map<string, number>();
  /** By slot: the item. */
  private readonly items: string[] = [];
  // The arrays start small and double up to `capacity` as items arrive: a rule that sees few
  // values (a request-supplied limit's rule sees one) costs little.
  /** By slot: the estimated weight. */
  private counts: Float64Array;
  /** By slot: the estimated refused weight. */
  private overs: Float64Array;
  /** By slot: the overestimate bound (the count inherited when the item took the slot). */
  private errors: Float64Array;
  /** Min-heap of slots by count: `heap[0]` is the lightest slot. */
  private heap: Int32Array;
  /** By slot: its index in `heap`. */
  private heapIndex: Int32Array;
  private used = 0;
  private weight = 0;
  /** The item added last and its slot: a hot item skips the Map probe ("" when none). */
  private lastItem = "";
  private lastSlot = -1;

  /**
   * @param capacity - counters kept, an integer ≥ 1; memory grows with the items seen, up to
   *   this many
   * @throws RangeError when `capacity` is not an integer ≥ 1
   */
  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1)
      throw new RangeError(
        `invalid Space-Saving capacity ${capacity}: expected an integer ≥ 1`,
      );
    this.capacity = capacity;
    const initial = Math.min(capacity, initialSlots);
    this.counts = new Float64Array(initial);
    this.overs = new Float64Array(initial);
    this.errors = new Float64Array(initial);
    this.heap = new Int32Array(initial);
    this.heapIndex = new Int32Array(initial);
  }

  /** Sum of the weights added since the last {@link SpaceSaving.clear} (`N`). */
  get total(): number {
    return this.weight;
  }

  /** Items monitored (≤ `capacity`). */
  get size(): number {
    return this.used;
  }

  /**
   * The smallest counter once every counter is in use, else 0: an upper bound of the true
   * weight of any item that is not monitored.
   */
  get minCount(): number {
    return this.used < this.capacity ? 0 : this.counts[this.heap[0]!]!;
  }

  /**
   * Adds `weight` to `item`, `overLimit` of it refused.
   *
   * @param weight - hits, > 0 (callers skip 0 and refunds: a negative weight would break the
   *   bounds)
   * @param overLimit - the refused part of `weight`, 0 ≤ `overLimit` ≤ `weight`
   */
  add(item: string, weight: number, overLimit: number): void {
    this.weight += weight;
    let slot =
      item === this.lastItem && this.lastSlot >= 0
        ? this.lastSlot
        : this.slots.get(item);
    if (slot !== undefined) {
      this.counts[slot]! += weight;
      this.overs[slot]! += overLimit;
      this.siftDown(this.heapIndex[slot]!);
      this.lastItem = item;
      this.lastSlot = slot;
      return;
    }
    if (this.used < this.capacity) {
      if (this.used === this.counts.length) this.grow();
      slot = this.used++;
      this.slots.set(item, slot);
      this.items[slot] = item;
      this.counts[slot] = weight;
      this.overs[slot] = overLimit;
      this.errors[slot] = 0;
      this.heap[slot] = slot;
      this.heapIndex[slot] = slot;
      this.siftUp(slot);
      this.lastItem = item;
      this.lastSlot = slot;
      return;
    }
    // Evict the lightest item. The newcomer's true weight before now was at most the
    // smallest counter (it was not monitored), and so was its refused weight: inheriting the
    // count as both keeps each estimate at or above the truth, at most `min` above.
    slot = this.heap[0]!;
    const min = this.counts[slot]!;
    this.slots.delete(this.items[slot]!);
    this.slots.set(item, slot);
    this.items[slot] = item;
    this.counts[slot] = min + weight;
    this.overs[slot] = min + overLimit;
    this.errors[slot] = min;
    this.siftDown(0);
    this.lastItem = item;
    this.lastSlot = slot;
  }

  /** The estimate of one item, or `undefined` when it is not monitored. */
  get(item: string): SketchEntry | undefined {
    const slot = this.slots.get(item);
    return slot === undefined ? undefined : this.entry(slot);
  }

  /** Calls `visit` with every monitored item, in no particular order. */
  forEach(visit: (entry: SketchEntry) => void): void {
    for (let slot = 0; slot < this.used; slot++) visit(this.entry(slot));
  }

  /** Forgets every item and the total; keeps the allocated arrays for reuse. */
  clear(): void {
    this.slots.clear();
    this.items.length = 0;
    this.used = 0;
    this.weight = 0;
    this.lastItem = "";
    this.lastSlot = -1;
  }

  /** Doubles the arrays, up to `capacity`. */
  private grow(): void {
    const size = Math.min(this.capacity, 2 * this.counts.length);
    const widen = <T extends Float64Array | Int32Array>(from: T, to: T): T => {
      to.set(from);
      return to;
    };
    this.counts = widen(this.counts, new Float64Array(size));
    this.overs = widen(this.overs, new Float64Array(size));
    this.errors = widen(this.errors, new Float64Array(size));
    this.heap = widen(this.heap, new Int32Array(size));
    this.heapIndex = widen(this.heapIndex, new Int32Array(size));
  }

  private entry(slot: number): SketchEntry {
    return {
      item: this.items[slot]!,
      count: this.counts[slot]!,
      overLimit: this.overs[slot]!,
      error: this.errors[slot]!,
    };
  }

  private siftUp(at: number): void {
    const { heap, heapIndex, counts } = this;
    const slot = heap[at]!;
    const count = counts[slot]!;
    while (at > 0) {
      const parentAt = (at - 1) >> 1;
      const parent = heap[parentAt]!;
      if (counts[parent]! <= count) break;
      heap[at] = parent;
      heapIndex[parent] = at;
      at = parentAt;
    }
    heap[at] = slot;
    heapIndex[slot] = at;
  }

  private siftDown(at: number): void {
    const { heap, heapIndex, counts } = this;
    const n = this.used;
    const slot = heap[at]!;
    const count = counts[slot]!;
    for (;;) {
      const left = 2 * at + 1;
      if (left >= n) break;
      const right = left + 1;
      let child = left;
      if (right < n && counts[heap[right]!]! < counts[heap[left]!]!)
        child = right;
      const childSlot = heap[child]!;
      if (counts[childSlot]! >= count) break;
      heap[at] = childSlot;
      heapIndex[childSlot] = at;
      at = child;
    }
    heap[at] = slot;
    heapIndex[slot] = at;
  }
}
