// The in-process table of run-time overrides that ShouldRateLimit probes after each
// descriptor's tree lookup (limiter/decision-hooks.ts `OverrideLookup`). Every backend keeps
// one: the memory and mc backends as the only copy, the kv backend as the replica's mirror of
// the store (kv-override-store.ts).
//
// Cost on the hot path (bench/overrides.ts measures it): a domain without overrides costs one
// Map miss; a domain with exact overrides one probe key (a concatenation per entry) and one Map
// probe. Prefix-wildcard overrides are grouped by shape (their keys, and the prefix length at
// each wildcard position), and only in a domain that has some, each shape costs one more probe
// key (the request's values cut to the shape's prefixes) and one Map probe: a thousand
// wildcard overrides of a few prefix lengths cost a few probes, not a scan.
// An override's compiled limit is shared by every override with the same resolved limit, and
// the limit laid over a rule is cached per rule, so a hit allocates nothing. A hit reads the
// clock only when the override expires.

import { create } from "@bufbuild/protobuf";
import type { RateLimit } from "../config/rate-limit-config.js";
import type { OverrideLookup } from "../limiter/decision-hooks.js";
import {
  OverrideLimitSchema,
  type OverrideLimit,
  type RateLimitDescriptor,
} from "../proto.js";
import type { Clock } from "../util/clock.js";
import {
  descriptorText,
  isWildcardValue,
  parseProbeKey,
  prefixProbeKey,
  probeKey,
  type OverrideEntry,
} from "./override-key.js";
import { ExpiryHeap } from "./expiry-heap.js";
import {
  applyOverrideShape,
  compileOverrideLimit,
  type OverrideShape,
} from "./override-limit.js";

/** One override, as set (the limit resolved; see `resolveOverrideLimit`). */
export interface OverrideRecord {
  readonly domain: string;
  /** The descriptor's entries, in order; a value ending in `*` is a prefix wildcard. */
  readonly entries: readonly OverrideEntry[];
  /** The resolved limit (every field filled). */
  readonly limit: OverrideLimit;
  /** When it stops applying, ms since the epoch; `undefined`: never. */
  readonly expireMs: number | undefined;
  /** Free text given with the change. */
  readonly reason: string;
  /** Who set it. */
  readonly actor: string;
  /** When it was set, ms since the epoch. */
  readonly updateMs: number;
}

/** The override that decided a descriptor's limit, as Explain shows it. */
export interface AppliedOverride {
  /** The limit counted (the override's over the rule's). */
  readonly limit: RateLimit;
  /** The override's descriptor text as set (`tenant=acme*`). */
  readonly descriptor: string;
  readonly reason: string;
  readonly actor: string;
  /** ms since the epoch; `undefined`: never. */
  readonly expireMs: number | undefined;
  /** ms since the epoch. */
  readonly updateMs: number;
}

/** A compiled limit shared by every override with the same resolved limit. */
interface CompiledLimit {
  readonly identity: string;
  readonly limit: OverrideLimit;
  readonly shape: OverrideShape;
  /** Overrides using it; dropped from the table at 0. */
  refs: number;
  /** Single-entry cache: the last frozen rule limit it was laid over, and the result. */
  last: { readonly rule: RateLimit; readonly limit: RateLimit } | undefined;
  /** The limit laid over each frozen rule limit met (weakly: a reload drops old rules). */
  readonly byRule: WeakMap<RateLimit, RateLimit>;
}

/**
 * The prefix-wildcard overrides of one shape: the same keys in the same order, and the same
 * prefix length at each wildcard position. Each is stored under the probe key of its entries
 * with the `*` dropped, and a request probes with its values cut to the same prefixes.
 */
interface WildcardShape {
  /** Keys and prefix lengths, for identity and a stable order. */
  readonly signature: string;
  readonly keys: readonly string[];
  /** Per position: the prefix length of a wildcard value, -1 for an exact one. */
  readonly prefixLengths: readonly number[];
  /** Wildcard positions: fewer is more specific, tried first. */
  readonly wildcards: number;
  /** Sum of the prefix lengths: among as many wildcards, longer is tried first. */
  readonly prefixTotal: number;
  /** Stored probe key → slot. */
  readonly overrides: Map<string, number>;
}

/** The overrides of one domain, each as its slot (see {@link OverrideTable}). */
interface DomainOverrides {
  /** Probe key → slot. */
  readonly exact: Map<string, number>;
  /** The wildcard overrides by probe key of their entries as set (`*` included) → slot. */
  readonly wildcards: Map<string, number>;
  /** Most specific first (then by signature, so every replica tries them in one order). */
  shapes: WildcardShape[];
}

/** An override in the expiry heap; stale when its domain no longer holds `slot` under `probe`. */
interface Expiry {
  readonly expireMs: number;
  readonly domain: string;
  readonly probe: string;
  readonly slot: number;
}

/**
 * A resync of one domain from its store, in chunks ({@link OverrideTable.beginResync}): the
 * overrides put through it replace the domain's, and {@link DomainResync.finish} removes the
 * ones neither put through it nor set otherwise since it began.
 */
export interface DomainResync {
  /**
   * Adds the override, or keeps the one held when it is the same (limit, times, reason, actor).
   *
   * @throws {@link OverrideLimitError} when the limit does not compile (the override of its
   *   descriptor, if any, is then removed by {@link DomainResync.finish})
   */
  put(record: OverrideRecord): void;
  /**
   * Removes the domain's overrides not put through this resync nor set since it began.
   *
   * @returns how many were removed
   */
  finish(): number;
}

/** Options of {@link OverrideTable}. */
export interface OverrideTableOptions {
  /** Reads the time of an expiring override's hit and of {@link OverrideTable.takeExpired}. */
  readonly clock: Clock;
}

/** Slots the typed arrays start with; they double when full. */
const initialSlots = 1024;
/** Float64 numbers per slot in {@link OverrideTable}'s `numbers`. */
const numbersPerSlot = 3;
/** Longest reason or actor shared through the intern pool, UTF-16 units. */
const internMaxLength = 256;
/** Distinct reasons and actors the intern pool keeps (then it stops growing). */
const internMaxSize = 4096;

/**
 * The run-time overrides of every domain, in process: the {@link OverrideLookup} the decision
 * probes, and the table the admin API and the stores change. Not safe to change while a
 * lookup runs, which JavaScript guarantees (lookups are synchronous).
 *
 * Storage: an override is a slot, an index into parallel arrays (its compiled limit, probe
 * key, reason, actor; its expiry, update time and resync mark in one Float64Array), and the
 * domain's maps hold its flat probe key → slot. So a million overrides are a million strings
 * and map entries for the garbage collector to mark, not an object, two boxed numbers and a
 * concatenation tree each (bench/overrides.ts: heap per override and CPU per decision with a
 * million loaded). Freed slots are reused. Reasons and actors are interned: a bulk import's
 * million copies of one reason are one string.
 */
export class OverrideTable implements OverrideLookup {
  private readonly clock: Clock;
  private readonly domains = new Map<string, DomainOverrides>();
  private readonly compiled = new Map<string, CompiledLimit>();
  private readonly expiries = new ExpiryHeap<Expiry>();
  /** Per slot: the compiled limit; `undefined` for a free slot. Parallel to `probes`. */
  private readonly limits: (CompiledLimit | undefined)[] = [];
  /** Per slot: the probe key as set (a wildcard's with its `*`); "" for a free slot. */
  private readonly probes: string[] = [];
  private readonly reasons: string[] = [];
  private readonly actors: string[] = [];
  /** Per slot: expireMs (`Infinity`: never), updateMs, and the resync epoch it was last set in. */
  private numbers = new Float64Array(initialSlots * numbersPerSlot);
  private readonly freeSlots: number[] = [];
  private readonly interned = new Map<string, string>();
  private count = 0;
  /** Overrides held that expire: while 0, a hit reads no time. */
  private expiring = 0;
  /** Raised by each {@link OverrideTable.beginResync}; every put marks its slot with it. */
  private epoch = 0;
  /** The limit compiled or found last (held while its `refs` > 0). */
  private lastCompiled: CompiledLimit | undefined;

  constructor(options: OverrideTableOptions) {
    this.clock = options.clock;
  }

  /** Overrides held (expired ones not yet taken included). */
  get size(): number {
    return this.count;
  }

  /**
   * The limit to count instead of `limit` when an override in force names this descriptor:
   * its exact entries first, else the most specific wildcard override (fewest wildcard
   * entries, then the longest prefixes). `undefined` when none
   * applies, when it has expired, or when the request carries its own `limit` (Envoy's
   * per-descriptor override wins). Never throws.
   */
  find(
    domain: string,
    descriptor: RateLimitDescriptor,
    limit: RateLimit,
  ): RateLimit | undefined {
    const slot = this.slotFor(domain, descriptor);
    if (slot < 0) return undefined;
    const compiled = this.limits[slot];
    return compiled === undefined ? undefined : limitOver(compiled, limit);
  }

  /**
   * What {@link OverrideTable.find} decides, with the override that decided it (for Explain):
   * `undefined` when no override applies.
   */
  applied(
    domain: string,
    descriptor: RateLimitDescriptor,
    limit: RateLimit,
  ): AppliedOverride | undefined {
    const slot = this.slotFor(domain, descriptor);
    if (slot < 0) return undefined;
    const record = this.toRecord(domain, slot);
    return {
      limit: limitOver(this.compiledAt(slot), limit),
      descriptor: descriptorText(record.entries),
      reason: record.reason,
      actor: record.actor,
      expireMs: record.expireMs,
      updateMs: record.updateMs,
    };
  }

  /**
   * The slot of the override in force for a request descriptor (see
   * {@link OverrideTable.find}), or -1.
   */
  private slotFor(domain: string, descriptor: RateLimitDescriptor): number {
    // A process without overrides (the default) pays one size check per descriptor.
    if (this.domains.size === 0 || descriptor.limit !== undefined) return -1;
    const overrides = this.domains.get(domain);
    if (overrides === undefined) return -1;
    const entries = descriptor.entries;
    if (overrides.exact.size > 0) {
      const slot = overrides.exact.get(probeKey(entries));
      if (slot !== undefined && (this.expiring === 0 || this.inForce(slot)))
        return slot;
    }
    const shapes = overrides.shapes;
    if (shapes.length === 0) return -1;
    const n = entries.length;
    for (const shape of shapes) {
      if (shape.keys.length !== n || !sameKeys(shape.keys, entries)) continue;
      const probe = prefixProbeKey(entries, shape.prefixLengths);
      if (probe === undefined) continue;
      const slot = shape.overrides.get(probe);
      if (slot !== undefined && (this.expiring === 0 || this.inForce(slot)))
        return slot;
    }
    return -1;
  }

  /** Whether the override in `slot` has not expired (reads the clock only if it expires). */
  private inForce(slot: number): boolean {
    const expireMs = this.expireAt(slot);
    return expireMs === Infinity || this.clock.nowMs() < expireMs;
  }

  /**
   * Adds or replaces the override of `record.domain` and `record.entries`.
   *
   * @returns the override it replaced (even an expired one not yet taken), or `undefined`
   * @throws {@link OverrideLimitError} when the limit does not compile (the table is unchanged)
   */
  put(record: OverrideRecord): OverrideRecord | undefined {
    return this.add(record, flat(probeKey(record.entries)), true);
  }

  /**
   * {@link OverrideTable.put} with the record's probe key (flat). `held`: whether the table
   * may hold an override under it (`false` saves the lookup, whose cost a million-entry map
   * makes a memory latency); `true` also builds the record replaced, to return it.
   */
  private add(
    record: OverrideRecord,
    probe: string,
    held: boolean,
  ): OverrideRecord | undefined {
    const compiled = this.compile(record.limit);
    // Counted before the old override lets go of it: replacing an override by one with the
    // same limit must not drop the shared compile.
    compiled.refs++;
    const before = held ? this.detach(record.domain, probe, true) : undefined;
    let overrides = this.domains.get(record.domain);
    if (overrides === undefined) {
      overrides = { exact: new Map(), wildcards: new Map(), shapes: [] };
      this.domains.set(record.domain, overrides);
    }
    const slot = this.allocate();
    const expireMs = record.expireMs ?? Infinity;
    this.limits[slot] = compiled;
    this.probes[slot] = probe;
    this.reasons[slot] = this.intern(record.reason);
    this.actors[slot] = this.intern(record.actor);
    const at = slot * numbersPerSlot;
    this.numbers[at] = expireMs;
    this.numbers[at + 1] = record.updateMs;
    this.numbers[at + 2] = this.epoch;
    if (record.entries.some((e) => isWildcardValue(e.value))) {
      overrides.wildcards.set(probe, slot);
      const shape = shapeOf(overrides, record.entries);
      shape.overrides.set(flat(storedProbe(record.entries)), slot);
    } else {
      overrides.exact.set(probe, slot);
    }
    this.count++;
    if (expireMs !== Infinity) {
      this.expiring++;
      this.expiries.push({ expireMs, domain: record.domain, probe, slot });
    }
    return before;
  }

  /**
   * Removes the override of a descriptor (the entries exactly as set, wildcards included).
   *
   * @returns the override removed (even an expired one not yet taken), or `undefined`
   */
  remove(
    domain: string,
    entries: readonly OverrideEntry[],
  ): OverrideRecord | undefined {
    return this.detach(domain, probeKey(entries), true);
  }

  /** The override of a descriptor as set (expired or not), or `undefined`. */
  get(
    domain: string,
    entries: readonly OverrideEntry[],
  ): OverrideRecord | undefined {
    const overrides = this.domains.get(domain);
    if (overrides === undefined) return undefined;
    const slot = slotOf(overrides, probeKey(entries));
    return slot === undefined ? undefined : this.toRecord(domain, slot);
  }

  /**
   * The overrides in force (not expired at `nowMs`) of one domain, or of every domain when
   * `domain` is `undefined`; sorted by domain, then by descriptor text.
   */
  list(domain: string | undefined, nowMs: number): OverrideRecord[] {
    const out: OverrideRecord[] = [];
    const names =
      domain === undefined ? [...this.domains.keys()].sort() : [domain];
    for (const name of names) {
      const overrides = this.domains.get(name);
      if (overrides === undefined) continue;
      const records: { record: OverrideRecord; text: string }[] = [];
      for (const held of [overrides.exact, overrides.wildcards])
        for (const slot of held.values()) {
          if (this.expireAt(slot) <= nowMs) continue;
          const record = this.toRecord(name, slot);
          records.push({ record, text: descriptorText(record.entries) });
        }
      records.sort((a, b) => (a.text < b.text ? -1 : a.text > b.text ? 1 : 0));
      for (const { record } of records) out.push(record);
    }
    return out;
  }

  /** Domains with at least one override held. */
  domainNames(): string[] {
    return [...this.domains.keys()];
  }

  /**
   * Replaces every override of a domain by `records` (a resync from the store), keeping the
   * held entries whose record is unchanged.
   *
   * @returns the records that did not compile (left out), with their errors
   */
  replaceDomain(
    domain: string,
    records: readonly OverrideRecord[],
  ): { record: OverrideRecord; error: unknown }[] {
    const failed: { record: OverrideRecord; error: unknown }[] = [];
    const resync = this.beginResync(domain);
    for (const record of records) {
      try {
        resync.put(record);
      } catch (error) {
        failed.push({ record, error });
      }
    }
    resync.finish();
    return failed;
  }

  /**
   * Starts replacing one domain's overrides by those read from a store, a chunk at a time:
   * the table goes on answering meanwhile, with the overrides held and those put so far.
   * Overrides set or removed through {@link OverrideTable.put} and
   * {@link OverrideTable.remove} while it runs are kept as they are.
   */
  beginResync(domain: string): DomainResync {
    const epoch = ++this.epoch;
    return {
      put: (record) => {
        if (record.domain !== domain)
          throw new RangeError(
            `resync of domain ${domain} given an override of ${record.domain}`,
          );
        // Flat once: its hash is then computed once for the lookups below.
        const probe = flat(probeKey(record.entries));
        const overrides = this.domains.get(domain);
        const slot =
          overrides === undefined ? undefined : slotOf(overrides, probe);
        if (slot !== undefined && this.holds(slot, record)) {
          this.numbers[slot * numbersPerSlot + 2] = this.epoch;
          return;
        }
        try {
          this.compile(record.limit);
        } catch (err) {
          // The override held for this descriptor (if any) is not what the store holds:
          // finish() removes it.
          if (slot !== undefined)
            this.numbers[slot * numbersPerSlot + 2] = epoch - 1;
          throw err;
        }
        if (slot !== undefined) this.detach(domain, probe, false);
        this.add(record, probe, false);
      },
      finish: () => {
        const overrides = this.domains.get(domain);
        if (overrides === undefined) return 0;
        const stale: string[] = [];
        for (const held of [overrides.exact, overrides.wildcards])
          for (const [probe, slot] of held)
            if ((this.numbers[slot * numbersPerSlot + 2] ?? 0) < epoch)
              stale.push(probe);
        for (const probe of stale) this.detach(domain, probe, false);
        return stale.length;
      },
    };
  }

  /**
   * Removes and returns the overrides expired at `nowMs`, soonest first. Cost: log n per
   * override taken.
   */
  takeExpired(nowMs: number): OverrideRecord[] {
    const out: OverrideRecord[] = [];
    const heap = this.expiries;
    for (;;) {
      const top = heap.peek();
      if (top === undefined || top.expireMs > nowMs) break;
      heap.pop();
      const overrides = this.domains.get(top.domain);
      // Replaced or removed since: not this override any more.
      if (
        overrides === undefined ||
        slotOf(overrides, top.probe) !== top.slot ||
        this.numbers[top.slot * numbersPerSlot] !== top.expireMs
      )
        continue;
      const record = this.detach(top.domain, top.probe, true);
      if (record !== undefined) out.push(record);
    }
    return out;
  }

  /** The soonest expiry held, ms since the epoch; `undefined` when none expires. */
  nextExpiryMs(): number | undefined {
    return this.expiries.peek()?.expireMs;
  }

  private compile(limit: OverrideLimit): CompiledLimit {
    // A bulk load puts one limit many times over: compared field by field, no identity text.
    const last = this.lastCompiled;
    if (last !== undefined && last.refs > 0 && sameLimit(last.limit, limit))
      return last;
    const identity = limitIdentity(limit);
    let compiled = this.compiled.get(identity);
    if (compiled === undefined) {
      compiled = {
        identity,
        limit: create(OverrideLimitSchema, limit),
        shape: compileOverrideLimit(limit),
        refs: 0,
        last: undefined,
        byRule: new WeakMap(),
      };
      this.compiled.set(identity, compiled);
    }
    this.lastCompiled = compiled;
    return compiled;
  }

  /** Whether `slot` holds exactly `record` (its descriptor already matched). */
  private holds(slot: number, record: OverrideRecord): boolean {
    const at = slot * numbersPerSlot;
    return (
      this.limits[slot]?.identity === limitIdentity(record.limit) &&
      this.numbers[at] === (record.expireMs ?? Infinity) &&
      this.numbers[at + 1] === record.updateMs &&
      this.reasons[slot] === record.reason &&
      this.actors[slot] === record.actor
    );
  }

  /** A free slot, the arrays grown if needed. */
  private allocate(): number {
    const reused = this.freeSlots.pop();
    if (reused !== undefined) return reused;
    const slot = this.limits.length;
    if ((slot + 1) * numbersPerSlot > this.numbers.length) {
      const grown = new Float64Array(this.numbers.length * 2);
      grown.set(this.numbers);
      this.numbers = grown;
    }
    // Appended in step, so the arrays stay packed.
    this.limits.push(undefined);
    this.probes.push("");
    this.reasons.push("");
    this.actors.push("");
    return slot;
  }

  /** The one copy of a reason or actor held (bounded; long or surplus texts are not pooled). */
  private intern(text: string): string {
    if (text.length > internMaxLength) return text;
    const held = this.interned.get(text);
    if (held !== undefined) return held;
    if (this.interned.size < internMaxSize) this.interned.set(text, text);
    return text;
  }

  /**
   * Removes the override under `probe`, if any; returns it when `answer` is set (else
   * `undefined`).
   */
  private detach(
    domain: string,
    probe: string,
    answer: boolean,
  ): OverrideRecord | undefined {
    const overrides = this.domains.get(domain);
    if (overrides === undefined) return undefined;
    let slot = overrides.exact.get(probe);
    if (slot !== undefined) overrides.exact.delete(probe);
    else {
      slot = overrides.wildcards.get(probe);
      if (slot === undefined) return undefined;
      overrides.wildcards.delete(probe);
      const entries = parseProbeKey(probe);
      const shape = shapeOf(overrides, entries);
      shape.overrides.delete(storedProbe(entries));
      if (shape.overrides.size === 0)
        overrides.shapes = overrides.shapes.filter((s) => s !== shape);
    }
    const record = answer ? this.toRecord(domain, slot) : undefined;
    this.count--;
    const compiled = this.compiledAt(slot);
    if (--compiled.refs === 0) this.compiled.delete(compiled.identity);
    if (this.numbers[slot * numbersPerSlot] !== Infinity) this.expiring--;
    this.limits[slot] = undefined;
    this.probes[slot] = "";
    this.reasons[slot] = "";
    this.actors[slot] = "";
    this.freeSlots.push(slot);
    if (overrides.exact.size === 0 && overrides.wildcards.size === 0)
      this.domains.delete(domain);
    return record;
  }

  private toRecord(domain: string, slot: number): OverrideRecord {
    const expireMs = this.expireAt(slot);
    return {
      domain,
      entries: parseProbeKey(this.probes[slot] ?? ""),
      limit: this.compiledAt(slot).limit,
      expireMs: expireMs === Infinity ? undefined : expireMs,
      reason: this.reasons[slot] ?? "",
      actor: this.actors[slot] ?? "",
      updateMs: this.numbers[slot * numbersPerSlot + 1] ?? 0,
    };
  }

  /** The expiry of the override in `slot`, ms since the epoch; `Infinity`: never. */
  private expireAt(slot: number): number {
    return this.numbers[slot * numbersPerSlot] ?? Infinity;
  }

  /** The compiled limit of a held slot. */
  private compiledAt(slot: number): CompiledLimit {
    const compiled = this.limits[slot];
    // Every slot a map holds has its limit; a free one is in no map.
    if (compiled === undefined)
      throw new Error(`override table: slot ${String(slot)} is free`);
    return compiled;
  }
}

/** The slot of a probe key as set (exact or wildcard) in a domain, or `undefined`. */
function slotOf(overrides: DomainOverrides, probe: string): number | undefined {
  return overrides.exact.get(probe) ?? overrides.wildcards.get(probe);
}

/**
 * The same text as one flat string. A probe key built by concatenation is a tree of V8
 * cons-strings (three heap objects for `key=value`); kept as a map key for the table's
 * lifetime it costs ~72 bytes and two objects more per override than its flat copy
 * (measured: 149 against 77 bytes per entry of a million-entry Map). `split` and `join` build
 * a sequential string, and give back the same text for any separator.
 */
function flat(text: string): string {
  return text.split("\u0001").join("\u0001");
}

/** The limit a compiled override puts over a rule's limit (cached per frozen rule limit). */
function limitOver(compiled: CompiledLimit, rule: RateLimit): RateLimit {
  const last = compiled.last;
  if (last?.rule === rule) return last.limit;
  let limit = compiled.byRule.get(rule);
  if (limit === undefined) {
    limit = applyOverrideShape(rule, compiled.shape);
    // A rule limit derived for one request (detailed_metric, share_threshold) is a fresh
    // object each time: caching it would only keep it alive.
    if (!Object.isFrozen(rule)) return limit;
    compiled.byRule.set(rule, limit);
  }
  compiled.last = { rule, limit };
  return limit;
}

/** Whether a request's entries have a shape's keys, in order (lengths already equal). */
function sameKeys(
  keys: readonly string[],
  entries: readonly { readonly key: string }[],
): boolean {
  for (let i = 0; i < keys.length; i++)
    if (entries[i]?.key !== keys[i]) return false;
  return true;
}

/** The prefix length of each position of a wildcard override's entries (-1: exact). */
function prefixLengthsOf(entries: readonly OverrideEntry[]): number[] {
  return entries.map((e) =>
    isWildcardValue(e.value) ? e.value.length - 1 : -1,
  );
}

/** The key a wildcard override is stored under in its shape: its entries, `*` dropped. */
function storedProbe(entries: readonly OverrideEntry[]): string {
  return prefixProbeKey(entries, prefixLengthsOf(entries)) ?? "";
}

/** The shape of a wildcard override's entries in a domain, created (in order) if new. */
function shapeOf(
  overrides: DomainOverrides,
  entries: readonly OverrideEntry[],
): WildcardShape {
  const keys = entries.map((e) => e.key);
  const prefixLengths = prefixLengthsOf(entries);
  const signature = JSON.stringify([keys, prefixLengths]);
  const held = overrides.shapes.find((s) => s.signature === signature);
  if (held !== undefined) return held;
  const wild = prefixLengths.filter((length) => length >= 0);
  const shape: WildcardShape = {
    signature,
    keys,
    prefixLengths,
    wildcards: wild.length,
    prefixTotal: wild.reduce((sum, length) => sum + length, 0),
    overrides: new Map(),
  };
  overrides.shapes = [...overrides.shapes, shape].sort(
    (a, b) =>
      a.wildcards - b.wildcards ||
      b.prefixTotal - a.prefixTotal ||
      (a.signature < b.signature ? -1 : a.signature > b.signature ? 1 : 0),
  );
  return shape;
}

/** Whether two limits have the same identity ({@link limitIdentity}), without building it. */
function sameLimit(a: OverrideLimit, b: OverrideLimit): boolean {
  return (
    a.requestsPerUnit === b.requestsPerUnit &&
    a.unit === b.unit &&
    a.unlimited === b.unlimited &&
    a.unitMultiplier === b.unitMultiplier &&
    a.algorithm === b.algorithm &&
    a.burst === b.burst &&
    a.shadowMode === b.shadowMode &&
    a.timeZone === b.timeZone &&
    a.weekStart === b.weekStart
  );
}

/** The identity of a resolved limit: overrides with equal identities share one compile. */
function limitIdentity(limit: OverrideLimit): string {
  return [
    limit.requestsPerUnit,
    limit.unit,
    limit.unlimited ? 1 : 0,
    limit.unitMultiplier,
    limit.algorithm,
    limit.burst,
    limit.shadowMode ? 1 : 0,
    limit.timeZone,
    limit.weekStart,
  ].join("|");
}
