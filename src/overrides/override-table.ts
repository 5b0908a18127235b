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

/** One override in the table. */
interface TableEntry {
  /** Its probe key (the map key of an exact override; the same string, not a copy). */
  readonly probe: string;
  readonly compiled: CompiledLimit;
  /** ms since the epoch; `Infinity`: never. */
  readonly expireMs: number;
  readonly reason: string;
  readonly actor: string;
  readonly updateMs: number;
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
  readonly overrides: Map<string, TableEntry>;
}

/** The overrides of one domain. */
interface DomainOverrides {
  readonly exact: Map<string, TableEntry>;
  /** The wildcard overrides by probe key of their entries as set (`*` included). */
  readonly wildcards: Map<string, TableEntry>;
  /** Most specific first (then by signature, so every replica tries them in one order). */
  shapes: WildcardShape[];
}

/** An override in the expiry heap; stale when the table no longer holds `entry`. */
interface Expiry {
  readonly expireMs: number;
  readonly domain: string;
  readonly probe: string;
  readonly entry: TableEntry;
}

/** Options of {@link OverrideTable}. */
export interface OverrideTableOptions {
  /** Reads the time of an expiring override's hit and of {@link OverrideTable.takeExpired}. */
  readonly clock: Clock;
}

/**
 * The run-time overrides of every domain, in process: the {@link OverrideLookup} the decision
 * probes, and the table the admin API and the stores change. Not safe to change while a
 * lookup runs, which JavaScript guarantees (lookups are synchronous).
 */
export class OverrideTable implements OverrideLookup {
  private readonly clock: Clock;
  private readonly domains = new Map<string, DomainOverrides>();
  private readonly compiled = new Map<string, CompiledLimit>();
  private readonly expiries = new ExpiryHeap<Expiry>();
  private count = 0;

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
    const entry = this.entryFor(domain, descriptor);
    return entry === undefined ? undefined : limitOver(entry.compiled, limit);
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
    const entry = this.entryFor(domain, descriptor);
    if (entry === undefined) return undefined;
    return {
      limit: limitOver(entry.compiled, limit),
      descriptor: descriptorText(parseProbeKey(entry.probe)),
      reason: entry.reason,
      actor: entry.actor,
      expireMs: entry.expireMs === Infinity ? undefined : entry.expireMs,
      updateMs: entry.updateMs,
    };
  }

  /** The override in force for a request descriptor (see {@link OverrideTable.find}). */
  private entryFor(
    domain: string,
    descriptor: RateLimitDescriptor,
  ): TableEntry | undefined {
    // A process without overrides (the default) pays one size check per descriptor.
    if (this.domains.size === 0 || descriptor.limit !== undefined)
      return undefined;
    const overrides = this.domains.get(domain);
    if (overrides === undefined) return undefined;
    const entries = descriptor.entries;
    if (overrides.exact.size > 0) {
      const entry = overrides.exact.get(probeKey(entries));
      if (
        entry !== undefined &&
        (entry.expireMs === Infinity || this.clock.nowMs() < entry.expireMs)
      )
        return entry;
    }
    const shapes = overrides.shapes;
    if (shapes.length === 0) return undefined;
    const n = entries.length;
    for (const shape of shapes) {
      if (shape.keys.length !== n || !sameKeys(shape.keys, entries)) continue;
      const probe = prefixProbeKey(entries, shape.prefixLengths);
      if (probe === undefined) continue;
      const entry = shape.overrides.get(probe);
      if (
        entry === undefined ||
        (entry.expireMs !== Infinity && this.clock.nowMs() >= entry.expireMs)
      )
        continue;
      return entry;
    }
    return undefined;
  }

  /**
   * Adds or replaces the override of `record.domain` and `record.entries`.
   *
   * @returns the override it replaced (even an expired one not yet taken), or `undefined`
   * @throws {@link OverrideLimitError} when the limit does not compile (the table is unchanged)
   */
  put(record: OverrideRecord): OverrideRecord | undefined {
    const compiled = this.compile(record.limit);
    const probe = probeKey(record.entries);
    const entry: TableEntry = {
      probe,
      compiled,
      expireMs: record.expireMs ?? Infinity,
      reason: record.reason,
      actor: record.actor,
      updateMs: record.updateMs,
    };
    compiled.refs++;
    const before = this.detach(record.domain, probe);
    let overrides = this.domains.get(record.domain);
    if (overrides === undefined) {
      overrides = { exact: new Map(), wildcards: new Map(), shapes: [] };
      this.domains.set(record.domain, overrides);
    }
    if (record.entries.some((e) => isWildcardValue(e.value))) {
      overrides.wildcards.set(probe, entry);
      const shape = shapeOf(overrides, record.entries);
      shape.overrides.set(storedProbe(record.entries), entry);
    } else {
      overrides.exact.set(probe, entry);
    }
    this.count++;
    if (entry.expireMs !== Infinity)
      this.expiries.push({
        expireMs: entry.expireMs,
        domain: record.domain,
        probe,
        entry,
      });
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
    return this.detach(domain, probeKey(entries));
  }

  /** The override of a descriptor as set (expired or not), or `undefined`. */
  get(
    domain: string,
    entries: readonly OverrideEntry[],
  ): OverrideRecord | undefined {
    const probe = probeKey(entries);
    const overrides = this.domains.get(domain);
    const entry =
      overrides?.exact.get(probe) ?? overrides?.wildcards.get(probe);
    return entry === undefined ? undefined : toRecord(domain, probe, entry);
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
      const held: [string, TableEntry][] = [
        ...overrides.exact,
        ...overrides.wildcards,
      ];
      const records = held
        .filter(([, entry]) => entry.expireMs > nowMs)
        .map(([probe, entry]) => toRecord(name, probe, entry))
        .map((record) => ({ record, text: descriptorText(record.entries) }));
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
    const wanted = new Set<string>();
    for (const record of records) {
      const probe = probeKey(record.entries);
      wanted.add(probe);
      const held = this.get(domain, record.entries);
      if (held !== undefined && sameRecord(held, record)) continue;
      try {
        this.put(record);
      } catch (error) {
        failed.push({ record, error });
        wanted.delete(probe);
      }
    }
    const overrides = this.domains.get(domain);
    if (overrides !== undefined) {
      const stale = [
        ...overrides.exact.keys(),
        ...overrides.wildcards.keys(),
      ].filter((probe) => !wanted.has(probe));
      for (const probe of stale) this.detach(domain, probe);
    }
    return failed;
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
      const held =
        overrides?.exact.get(top.probe) ?? overrides?.wildcards.get(top.probe);
      // Replaced or removed since: not this override any more.
      if (held !== top.entry) continue;
      this.detach(top.domain, top.probe);
      out.push(toRecord(top.domain, top.probe, top.entry));
    }
    return out;
  }

  /** The soonest expiry held, ms since the epoch; `undefined` when none expires. */
  nextExpiryMs(): number | undefined {
    return this.expiries.peek()?.expireMs;
  }

  private compile(limit: OverrideLimit): CompiledLimit {
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
    return compiled;
  }

  /** Removes the override under `probe`, if any; returns it. */
  private detach(domain: string, probe: string): OverrideRecord | undefined {
    const overrides = this.domains.get(domain);
    if (overrides === undefined) return undefined;
    let entry = overrides.exact.get(probe);
    if (entry !== undefined) overrides.exact.delete(probe);
    else {
      entry = overrides.wildcards.get(probe);
      if (entry === undefined) return undefined;
      overrides.wildcards.delete(probe);
      const entries = parseProbeKey(probe);
      const shape = shapeOf(overrides, entries);
      shape.overrides.delete(storedProbe(entries));
      if (shape.overrides.size === 0)
        overrides.shapes = overrides.shapes.filter((s) => s !== shape);
    }
    this.count--;
    const compiled = entry.compiled;
    if (--compiled.refs === 0) this.compiled.delete(compiled.identity);
    if (overrides.exact.size === 0 && overrides.wildcards.size === 0)
      this.domains.delete(domain);
    return toRecord(domain, probe, entry);
  }
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

function toRecord(
  domain: string,
  probe: string,
  entry: TableEntry,
): OverrideRecord {
  return {
    domain,
    entries: parseProbeKey(probe),
    limit: entry.compiled.limit,
    expireMs: entry.expireMs === Infinity ? undefined : entry.expireMs,
    reason: entry.reason,
    actor: entry.actor,
    updateMs: entry.updateMs,
  };
}

function sameRecord(a: OverrideRecord, b: OverrideRecord): boolean {
  return (
    limitIdentity(a.limit) === limitIdentity(b.limit) &&
    a.expireMs === b.expireMs &&
    a.reason === b.reason &&
    a.actor === b.actor &&
    a.updateMs === b.updateMs
  );
}
