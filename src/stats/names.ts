/**
 * Every statistic name and scope. These are an external contract with dashboards built for the
 * reference service (docs/reference-parity.md#stat-names); the product words are replaced by the
 * spec's neutral ones (`kv`, `mc`, `pushstats`).
 */
export const statNames = {
  /** Scope of per-rate-limit stats: `<scope>.<statsKey>.<stat>`. */
  rateLimitScope: "ratelimit.service.rate_limit",
  totalHits: "total_hits",
  overLimit: "over_limit",
  nearLimit: "near_limit",
  withinLimit: "within_limit",
  shadowMode: "shadow_mode",
  overLimitWithLocalCache: "over_limit_with_local_cache",
  domainNotFound: "domain_not_found",
  configLoadSuccess: "ratelimit.service.config_load_success",
  configLoadError: "ratelimit.service.config_load_error",
  globalShadowMode: "ratelimit.service.global_shadow_mode",
  /**
   * Gauge: 1 while the most recent config load or reload failed (the previous config, if any,
   * still serving), 0 once one succeeds. Not a reference name; created by the first failed
   * load, so a process whose loads all succeed reports exactly the reference's statistics.
   */
  configLastLoadFailed: "ratelimit.service.config_last_load_failed",
  /** Scope of call errors: `<scope>.<errType>`, e.g. `service_error`, `kv_error`. */
  shouldRateLimitErrorScope: "ratelimit.service.call.should_rate_limit",
  /** Scope of server stats: `<scope>.<method>.total_requests` / `.response_time`. */
  serverScope: "ratelimit_server",
  totalRequests: "total_requests",
  responseTime: "response_time",
  /**
   * Scope of the local over-limit cache gauges: `<scope>.<gauge>`
   * (docs/reference-parity.md#stat-names).
   */
  localCacheScope: "ratelimit.localcache",
  /**
   * Stats-key part that stands in for every value-derived stats key past the cardinality cap
   * (see `StatsManagerOptions.maxRequestDerivedStatsKeys`): `<scope>.<domain>.stats_overflow.<stat>`.
   * Not a reference name: the reference has no bound.
   */
  overflowKey: "stats_overflow",
  /**
   * Domain part that stands in for unknown request domains past the cap
   * (`StatsManagerOptions.maxUnknownDomains`): `<scope>.stats_overflow.domain_not_found`.
   */
  overflowDomain: "stats_overflow",
  /**
   * Backend failure handling (`BACKEND_FAILURE_MODE`, docs/failure-modes.md); not reference
   * names. Gauge `ratelimit.backend.degraded` is 1 while the circuit breaker is open.
   */
  backendDegraded: "ratelimit.backend.degraded",
  /** Counter: backend calls (real requests and probes) that failed or timed out. */
  backendFailures: "ratelimit.backend.failures",
  /** Counter: requests answered by the failure mode (allow, deny, local) instead of the backend. */
  backendDegradedDecisions: "ratelimit.backend.degraded_decisions",
  /** Counter: times the circuit breaker opened. */
  backendCircuitOpened: "ratelimit.backend.circuit_opened",
  backendReplayedHits: "ratelimit.backend.replayed_hits",
  /**
   * Gauge: backend calls the guard gave up on at the decision deadline whose own outcome is
   * still unknown (answered by the `local` mode, their replay held until it is known).
   */
  backendCallsInDoubt: "ratelimit.backend.calls_in_doubt",
  /**
   * Counter: calls answered by the `local` mode whose write the store counted anyway (a late
   * reply, or memcached written to and abandoned for silence): not replayed.
   */
  backendCountedLate: "ratelimit.backend.counted_late",
  /** Counter: calls that were not held in doubt because the bound was reached (replayed). */
  backendInDoubtOverflow: "ratelimit.backend.in_doubt_overflow",
  /**
   * Scope of the gRPC listener's HTTP/2 event counters, `<scope>.<event>`, one per
   * `Http2Event` of src/http2/limits.ts (`internal_error`, `enhance_your_calm`,
   * `malformed_request`, `handshake_timeout`, `idle_timeout`, `connection_limit`). Not
   * reference names: the reference has none. Each counter is created by its first event, so a
   * process that meets no abuse reports exactly the reference's statistics.
   */
  http2EventScope: "ratelimit.server.http2",
  /**
   * RLQS (`envoy.service.rate_limit_quota.v3`, docs/rlqs.md); not reference names. Gauge: the
   * open `StreamRateLimitQuotas` streams (one per Envoy).
   */
  rlqsStreams: "ratelimit.rlqs.streams",
  /** Counter: bucket reports ignored (empty bucket id, too many buckets on a stream). */
  rlqsIgnoredBuckets: "ratelimit.rlqs.ignored_buckets",
  /**
   * Counter: kv store commands of the shared RLQS ledger that failed (BACKEND_TYPE=kv); the
   * split goes on with the last demands read and the replica's own streams.
   */
  rlqsLedgerErrors: "ratelimit.rlqs.ledger_errors",
  /**
   * Scope of per-bucket RLQS stats, `<scope>.<domain>.<k1>_<v1>.<k2>_<v2>.<stat>` (entries in
   * key order); bounded: buckets past the cap share `<scope>.<domain>.stats_overflow`.
   */
  rlqsBucketScope: "ratelimit.rlqs.bucket",
  /** Gauge: streams subscribed to the bucket. */
  rlqsSubscribedStreams: "subscribed_streams",
  /**
   * Gauge: tokens per second assigned to the bucket's streams at the last split, summed (in
   * shadow mode what would have been assigned; 0 for a blanket rule).
   */
  rlqsAssignedTokensPerSecond: "assigned_tokens_per_second",
  /** Counter: requests the streams reported allowed. */
  rlqsReportedAllowed: "reported_allowed",
  /** Counter: requests the streams reported denied. */
  rlqsReportedDenied: "reported_denied",
} as const;

/**
 * Exported names and labels of the built-in pull (Prometheus) mapping, same as upstream
 * `src/stats/prom/default_mapper.yaml` (docs/reference-parity.md#pull-mapping). Also an external
 * contract.
 */
export const pullStatNames = {
  /** `ratelimit_service_rate_limit_<stat>` for the per-rule counters. */
  rateLimitPrefix: "ratelimit_service_rate_limit_",
  shouldRateLimitError: "ratelimit_service_should_rate_limit_error",
  totalRequests: "ratelimit_service_total_requests",
  /** Kept `_seconds` even when `PULLSTATS_RESPONSE_TIME_AS_MILLISECONDS` keeps milliseconds. */
  responseTime: "ratelimit_service_response_time_seconds",
  configLoadSuccess: "ratelimit_service_config_load_success",
  configLoadError: "ratelimit_service_config_load_error",
  /**
   * `ratelimit.service.config_last_load_failed` (gauge). Not in the reference's mapping: no rule
   * maps it, and the default escaping (dots to `_`) gives this name.
   */
  configLastLoadFailed: "ratelimit_service_config_last_load_failed",
  /** Label names. */
  domainLabel: "domain",
  key1Label: "key1",
  key2Label: "key2",
  errTypeLabel: "err_type",
  grpcMethodLabel: "grpc_method",
} as const;

const dottedQuad = /(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})/g;

/**
 * Returns a stats name safe for statsd: `:` and `|` become `_`, and the dots of any dotted IPv4
 * quad become `_` (`50.0.0.5` → `50_0_0_5`). Same rule as upstream `utils.SanitizeStatName`.
 */
export function sanitizeStatName(name: string): string {
  let out = name;
  if (out.includes(":") || out.includes("|")) out = out.replace(/[:|]/g, "_");
  if (/\d\.\d/.test(out)) out = out.replace(dottedQuad, "$1_$2_$3_$4");
  return out;
}

/** Marker that starts one serialized tag in a statistic name: `<name>.__<key>=<value>`. */
export const tagMarker = ".__";

/** One tag of a statistic (EXTRA_TAGS, or a tag a module puts in a name). */
export interface StatTag {
  readonly key: string;
  readonly value: string;
}

/**
 * Serializes tags into a name suffix the way the reference's stats library does
 * (docs/reference-parity.md#stat-tags): `.__<key>=<value>` per tag, sorted by key; `.`, `:` and `|`
 * in values become `_`; tags with an empty key or value are dropped. Returns "" for no tags.
 */
export function serializeTags(tags: readonly StatTag[]): string {
  const kept = tags
    .filter((tag) => tag.key !== "" && tag.value !== "")
    .map((tag) => ({ key: tag.key, value: tag.value.replace(/[.:|]/g, "_") }))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  let out = "";
  for (const tag of kept) out += `${tagMarker}${tag.key}=${tag.value}`;
  return out;
}

/**
 * Splits serialized tags off a name: `a.b.c.__k=v.__k2=v2` → `a.b.c` with tags `k=v`, `k2=v2`.
 * A `.__k` part without `=` is dropped (as upstream `src/godogstats/` does before applying mogrifiers).
 */
export function splitTags(fullName: string): {
  name: string;
  tags: StatTag[];
} {
  const at = fullName.indexOf(tagMarker);
  if (at < 0) return { name: fullName, tags: [] };
  const tags: StatTag[] = [];
  for (const part of fullName.slice(at + tagMarker.length).split(tagMarker)) {
    const eq = part.indexOf("=");
    if (eq > 0)
      tags.push({ key: part.slice(0, eq), value: part.slice(eq + 1) });
  }
  return { name: fullName.slice(0, at), tags };
}

/**
 * Returns `name` with `extra` tags merged into the tags it already carries, re-serialized in
 * key order (a tag already in the name wins over an extra tag with the same key).
 */
export function withExtraTags(name: string, extra: readonly StatTag[]): string {
  if (extra.length === 0) return name;
  const split = splitTags(name);
  const own = new Set(split.tags.map((tag) => tag.key));
  return (
    split.name +
    serializeTags([...split.tags, ...extra.filter((tag) => !own.has(tag.key))])
  );
}
