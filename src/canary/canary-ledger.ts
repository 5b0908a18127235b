// The canary's own counters, in this process: for each cache key the candidate uses, what its
// count differs by from the live one, and the live count last seen. With it the candidate's
// count of a key is always `live count + extra`, whichever config charged what:
//
// - a key only the candidate uses (a new rule, a changed window): the live count is 0 and
//   `extra` is the candidate's own count;
// - a key both use: `extra` adds up, per request, what the candidate charged minus what the
//   live decision charged. It stays 0 while both charge alike (the usual case); it moves when
//   they do not (a rule `replaces` in one config only, all-or-nothing or stop-increment charging
//   that refuses in one config only, a refund clamped at 0);
// - a request whose live decision did not use a key the candidate uses reads the live count
//   last seen for it.
//
// Token buckets the live decision does not share keep their TAT here too.

import {
  gcraDecide,
  type GcraDecision,
  type GcraParams,
} from "../limiter/gcra.js";

/** One key of a {@link CanaryLedger}. */
export interface LedgerEntry {
  /**
   * Window counters: the candidate's count minus the live count (may be negative while the
   * live config charged more).
   */
  extra: number;
  /** Window counters: the live count after the last request whose live decision used the key. */
  seen: number;
  /**
   * Token buckets: the candidate's TAT, µs since the Unix epoch, where it differs from the live
   * one; 0 when it does not (or for a window counter). `seen` holds the live TAT last seen.
   */
  tatUs: number;
  /** When the key may go, seconds since the Unix epoch. */
  expiresAtSeconds: number;
}

/** Options of {@link CanaryLedger}. */
export interface CanaryLedgerOptions {
  /**
   * Most keys kept (`MEMORY_MAX_KEYS`); beyond, the keys stored first are dropped (their counts
   * read as the live ones from then on). @defaultValue 1000000
   */
  readonly maxKeys?: number;
}

/** Keys by the second they expire, in insertion order. */
interface ExpiryList {
  readonly keys: string[];
}

/**
 * The in-process counters of one canary (see the file comment). A key lives until its window
 * ends (a sliding window's until the next one ends; a token bucket's until it is full again);
 * {@link CanaryLedger.sweep} drops expired keys. Memory: one map entry and one small object per
 * key, about 150 bytes for a 40-character key.
 */
export class CanaryLedger {
  private readonly entries = new Map<string, LedgerEntry>();
  private readonly expiries = new Map<number, ExpiryList>();
  private readonly maxKeys: number;
  /** Keys dropped for {@link CanaryLedgerOptions.maxKeys}. */
  dropped = 0;

  /** @throws {@link RangeError} when `maxKeys` is not a positive integer */
  constructor(options: CanaryLedgerOptions = {}) {
    const maxKeys = options.maxKeys ?? 1_000_000;
    if (!Number.isSafeInteger(maxKeys) || maxKeys < 1)
      throw new RangeError(
        `invalid maxKeys ${maxKeys}: expected an integer ≥ 1`,
      );
    this.maxKeys = maxKeys;
  }

  /** Number of keys held. */
  get size(): number {
    return this.entries.size;
  }

  /**
   * The entry of a key, if held. An empty ledger (the usual case with a remote store, which
   * keeps only keys where the candidate differs) answers without hashing the key.
   */
  get(cacheKey: string): LedgerEntry | undefined {
    return this.entries.size === 0 ? undefined : this.entries.get(cacheKey);
  }

  /** The candidate's count of a window counter the live decision did not read: seen + extra, ≥ 0. */
  count(cacheKey: string | undefined): number {
    if (cacheKey === undefined) return 0;
    const entry = this.entries.get(cacheKey);
    return entry === undefined ? 0 : Math.max(0, entry.seen + entry.extra);
  }

  /** The extra of a key (0 when not held). */
  extra(cacheKey: string | undefined): number {
    if (cacheKey === undefined || this.entries.size === 0) return 0;
    return this.entries.get(cacheKey)?.extra ?? 0;
  }

  /**
   * The entry of a key, created (with 0s) when absent.
   *
   * @param expiresAtSeconds - when a created key expires, seconds since the Unix epoch
   */
  entry(cacheKey: string, expiresAtSeconds: number): LedgerEntry {
    let entry = this.entries.get(cacheKey);
    if (entry !== undefined) return entry;
    if (this.entries.size >= this.maxKeys) this.drop();
    entry = { extra: 0, seen: 0, tatUs: 0, expiresAtSeconds };
    this.entries.set(cacheKey, entry);
    this.list(cacheKey, expiresAtSeconds);
    return entry;
  }

  /**
   * One GCRA step (`gcra.ts`) on a token bucket kept here: decides `hits` at `nowUs` and keeps
   * the new TAT until the bucket is full again.
   */
  takeTokens(
    cacheKey: string,
    params: GcraParams,
    hits: number,
    nowUs: number,
  ): GcraDecision {
    const held = this.entries.get(cacheKey);
    const stored =
      held === undefined
        ? undefined
        : held.tatUs > 0
          ? held.tatUs
          : held.seen > 0
            ? held.seen
            : undefined;
    const decision = gcraDecide(stored, nowUs, hits, params);
    const tat = decision.newTatUs;
    if (tat !== undefined) {
      this.entry(cacheKey, 0).tatUs = tat;
      this.keep(cacheKey, Math.ceil(tat / 1_000_000));
    }
    return decision;
  }

  /** Keeps a held key at least until `expiresAtSeconds` (a token bucket's later TAT). */
  keep(cacheKey: string, expiresAtSeconds: number): void {
    const entry = this.entries.get(cacheKey);
    if (entry === undefined || expiresAtSeconds <= entry.expiresAtSeconds)
      return;
    entry.expiresAtSeconds = expiresAtSeconds;
    this.list(cacheKey, expiresAtSeconds);
  }

  /** Drops every key that expired at or before `nowSeconds`. */
  sweep(nowSeconds: number): void {
    for (const [second, list] of this.expiries) {
      if (second > nowSeconds) continue;
      for (const key of list.keys) {
        const entry = this.entries.get(key);
        if (entry !== undefined && entry.expiresAtSeconds <= nowSeconds)
          this.entries.delete(key);
      }
      this.expiries.delete(second);
    }
  }

  private list(cacheKey: string, expiresAtSeconds: number): void {
    const list = this.expiries.get(expiresAtSeconds);
    if (list === undefined)
      this.expiries.set(expiresAtSeconds, { keys: [cacheKey] });
    else list.keys.push(cacheKey);
  }

  /** Makes room for one key: the expired ones go first, else the first listed. */
  private drop(): void {
    let need = this.entries.size - this.maxKeys + 1;
    const lists = [...this.expiries.entries()].sort((a, b) => a[0] - b[0]);
    for (const [second, list] of lists) {
      for (const key of list.keys) {
        if (this.entries.delete(key)) {
          this.dropped++;
          need--;
        }
      }
      this.expiries.delete(second);
      if (need <= 0) return;
    }
  }
}
