/**
 * The open streams of one connection, by stream id: an open-addressing hash table (linear
 * probing, backward-shift deletion, no tombstones) in two parallel arrays.
 *
 * Why not a `Map`: a connection's streams churn (every unary call adds one and deletes it a
 * few ms later), so a `Map` rehashes its backing table over and over. A replaced V8 table is
 * kept, entries included, until the next full collection, and as it lives in the old
 * generation every stream it held is treated as live by the young-generation collections
 * meanwhile: measured, the call objects, their decoded headers and requests were promoted to
 * the old generation and filled it (docs/performance.md "Round 3"). Here a deleted stream's
 * slot is overwritten at once and a grown table's old arrays are cleared, so a finished call
 * is garbage for the very next young-generation collection.
 *
 * Ids are HTTP/2 stream ids (positive 31-bit integers). Client ids are odd and increasing,
 * so `id >>> 1` spreads consecutive streams over consecutive slots.
 */
export class StreamTable<V> {
  private ids: Int32Array;
  private values_: (V | undefined)[];
  private mask: number;
  private count = 0;

  /** @param initialCapacity slots to start with, rounded up to a power of two (≥ 8) */
  constructor(initialCapacity = 64) {
    let capacity = 8;
    while (capacity < initialCapacity) capacity *= 2;
    this.ids = new Int32Array(capacity);
    this.values_ = new Array<V | undefined>(capacity).fill(undefined);
    this.mask = capacity - 1;
  }

  /** Number of streams held. */
  get size(): number {
    return this.count;
  }

  /** The stream with this id, if held. */
  get(id: number): V | undefined {
    const ids = this.ids;
    const mask = this.mask;
    for (let i = (id >>> 1) & mask; ; i = (i + 1) & mask) {
      const slot = ids[i] ?? 0;
      if (slot === id) return this.values_[i];
      if (slot === 0) return undefined;
    }
  }

  /**
   * Adds or replaces the stream with this id.
   *
   * @throws RangeError when `id` is not a positive 31-bit integer
   */
  set(id: number, value: V): void {
    if (!Number.isInteger(id) || id <= 0 || id > 0x7fffffff)
      throw new RangeError(`stream id ${id} is not a positive 31-bit integer`);
    if ((this.count + 1) * 2 > this.ids.length) this.grow();
    const ids = this.ids;
    const mask = this.mask;
    for (let i = (id >>> 1) & mask; ; i = (i + 1) & mask) {
      const slot = ids[i] ?? 0;
      if (slot === id) {
        this.values_[i] = value;
        return;
      }
      if (slot === 0) {
        ids[i] = id;
        this.values_[i] = value;
        this.count++;
        return;
      }
    }
  }

  /** Removes the stream with this id; returns whether it was held. */
  delete(id: number): boolean {
    const ids = this.ids;
    const values = this.values_;
    const mask = this.mask;
    let i = (id >>> 1) & mask;
    for (; ; i = (i + 1) & mask) {
      const slot = ids[i] ?? 0;
      if (slot === id) break;
      if (slot === 0) return false;
    }
    // Backward-shift deletion: move later entries of the probe run into the gap so every
    // entry stays reachable from its home slot without tombstones.
    let gap = i;
    for (let j = (gap + 1) & mask; (ids[j] ?? 0) !== 0; j = (j + 1) & mask) {
      const moved = ids[j] ?? 0;
      const home = (moved >>> 1) & mask;
      // Entry j may fill the gap when its home is not cyclically inside (gap, j].
      const inside =
        gap <= j ? home > gap && home <= j : home > gap || home <= j;
      if (!inside) {
        ids[gap] = moved;
        values[gap] = values[j];
        gap = j;
      }
    }
    ids[gap] = 0;
    values[gap] = undefined;
    this.count--;
    return true;
  }

  /** The streams held, in slot order, as a new array (safe to change the table while iterating it). */
  values(): V[] {
    const out: V[] = [];
    const ids = this.ids;
    for (let i = 0; i < ids.length; i++)
      if (ids[i] !== 0) out.push(this.values_[i] as V);
    return out;
  }

  /** Removes every stream. */
  clear(): void {
    this.ids.fill(0);
    this.values_.fill(undefined);
    this.count = 0;
  }

  private grow(): void {
    const oldIds = this.ids;
    const oldValues = this.values_;
    const capacity = oldIds.length * 2;
    this.ids = new Int32Array(capacity);
    this.values_ = new Array<V | undefined>(capacity).fill(undefined);
    this.mask = capacity - 1;
    this.count = 0;
    for (let i = 0; i < oldIds.length; i++) {
      const id = oldIds[i] ?? 0;
      if (id !== 0) this.set(id, oldValues[i] as V);
    }
    // The old array may already be in the old generation: leave nothing in it.
    oldValues.fill(undefined);
  }
}
