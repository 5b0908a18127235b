import type {
  RateLimit,
  RateLimitConfig,
} from "../../src/config/rate-limit-config.js";
import type { RateLimitDescriptor } from "../../src/proto.js";

/**
 * A RateLimitConfig keyed by the joined request entries (`k=v,k2=v2`), for service tests that
 * do not exercise YAML matching.
 */
export function fakeConfig(
  domain: string,
  limits: Record<string, RateLimit>,
): RateLimitConfig {
  return {
    getLimit(requestDomain: string, descriptor: RateLimitDescriptor) {
      if (requestDomain !== domain) return undefined;
      return limits[
        descriptor.entries.map((e) => `${e.key}=${e.value}`).join(",")
      ];
    },
    dump: () => "",
    domainCount: 1,
    domains: [domain],
  };
}
