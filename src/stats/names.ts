/**
 * Every statistic name and scope. These are an external contract with dashboards built for the
 * reference service (behavior.md §10.3); the product words are replaced by the spec's neutral
 * ones (`kv`, `mc`, `pushstats`).
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
  /** Scope of call errors: `<scope>.<errType>`, e.g. `service_error`, `kv_error`. */
  shouldRateLimitErrorScope: "ratelimit.service.call.should_rate_limit",
  /** Scope of server stats: `<scope>.<method>.total_requests` / `.response_time`. */
  serverScope: "ratelimit_server",
  totalRequests: "total_requests",
  responseTime: "response_time",
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
