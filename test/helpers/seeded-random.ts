/**
 * A seeded pseudo-random generator (mulberry32: 32-bit state, period 2^32) for property tests
 * that must replay: the same seed gives the same sequence on every machine.
 *
 * @returns a function giving numbers in [0, 1)
 */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
