// A seeded Zipf-like stream for the top-offenders tests: item i (1-based) is drawn with
// probability proportional to 1 / i^exponent, so a few items carry most of the traffic and a
// long tail carries the rest, as client addresses or API keys do.

import { mulberry32 } from "./seeded-random.js";

/**
 * Returns a sampler of 1-based item ranks in [1, items], P(i) ∝ 1 / i^exponent, replayable
 * from `seed`.
 */
export function zipfSampler(
  items: number,
  exponent: number,
  seed: number,
): () => number {
  const random = mulberry32(seed);
  const cumulative = new Float64Array(items);
  let sum = 0;
  for (let i = 0; i < items; i++) {
    sum += 1 / Math.pow(i + 1, exponent);
    cumulative[i] = sum;
  }
  return () => {
    const target = random() * sum;
    let lo = 0;
    let hi = items - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cumulative[mid]! < target) lo = mid + 1;
      else hi = mid;
    }
    return lo + 1;
  };
}

/** Exact counts of a stream: hits and refused hits per item. */
export class ExactCounts {
  readonly hits = new Map<string, number>();
  readonly overLimit = new Map<string, number>();
  total = 0;

  add(item: string, hits: number, overLimit: number): void {
    this.total += hits;
    this.hits.set(item, (this.hits.get(item) ?? 0) + hits);
    this.overLimit.set(item, (this.overLimit.get(item) ?? 0) + overLimit);
  }

  /** Items by true hits, heaviest first (ties by name). */
  ranked(): [string, number][] {
    return [...this.hits].sort((a, b) =>
      a[1] !== b[1] ? b[1] - a[1] : a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0,
    );
  }
}
