// A binary min-heap on expiry time, so that expiring overrides are taken in log n each
// instead of scanning every override at each sweep (a million overrides are a few ms a scan).

/** Something that expires at `expireMs` (ms since the epoch). */
export interface Expiring {
  readonly expireMs: number;
}

/** A min-heap of {@link Expiring} items: the soonest on top. */
export class ExpiryHeap<T extends Expiring> {
  private readonly items: T[] = [];

  /** Items held. */
  get size(): number {
    return this.items.length;
  }

  /** The soonest item, or `undefined` when empty. */
  peek(): T | undefined {
    return this.items[0];
  }

  /** Adds an item (log n). */
  push(item: T): void {
    const items = this.items;
    let i = items.length;
    items.push(item);
    while (i > 0) {
      const parentIndex = (i - 1) >> 1;
      const parent = items[parentIndex];
      if (parent === undefined || parent.expireMs <= item.expireMs) break;
      items[i] = parent;
      i = parentIndex;
    }
    items[i] = item;
  }

  /** Removes and returns the soonest item (log n), or `undefined` when empty. */
  pop(): T | undefined {
    const items = this.items;
    const top = items[0];
    const last = items.pop();
    if (top === undefined || last === undefined || items.length === 0)
      return top;
    let i = 0;
    for (;;) {
      const leftIndex = 2 * i + 1;
      const left = items[leftIndex];
      if (left === undefined) break;
      const right = items[leftIndex + 1];
      const [childIndex, child] =
        right !== undefined && right.expireMs < left.expireMs
          ? [leftIndex + 1, right]
          : [leftIndex, left];
      if (child.expireMs >= last.expireMs) break;
      items[i] = child;
      i = childIndex;
    }
    items[i] = last;
    return top;
  }
}
