import type { JsonObject, JsonValue } from "@bufbuild/protobuf";
import type { Decision } from "../limiter/decision.js";
import {
  OverrideRateLimitUnit,
  RateLimitResponse_Code as Code,
  type RateLimitRequest,
} from "../proto.js";

/**
 * Builds the response's `dynamic_metadata` (`RESPONSE_DYNAMIC_METADATA=true`), as upstream
 * `ratelimit.go` does (docs/reference-parity.md#dynamic-metadata), with keys inserted in sorted
 * order so the JSON matches Go's sorted map output:
 * - `descriptors`: one object per request descriptor: `entries` as `"key=value"` strings,
 *   `hitsAddend` (number) when the descriptor's own addend is present (0 included), `limit`
 *   (the override in protobuf text form) when present, `isNegativeHits: true` for a refund
 *   (between the two, in sorted order);
 * - `domain`: the request domain;
 * - `hitsAddend`: the request-level addend, when not 0;
 * - `metadata`: the config `metadata` of every descriptor that passed (not over limit, not
 *   unlimited, with a limit), merged in request order: the first value of a key wins, except
 *   that two objects merge recursively; only when non-empty.
 *
 * @param decision - the request's statuses and applied limits (undefined: none, unlimited or
 *   replaced)
 */
export function dynamicMetadata(
  request: RateLimitRequest,
  decision: Decision,
): JsonObject {
  const statuses = decision.statuses;
  const limits = decision.request.limits;
  const descriptors: JsonValue[] = request.descriptors.map((descriptor) => {
    const out: JsonObject = {
      entries: descriptor.entries.map((e) => `${e.key}=${e.value}`),
    };
    if (descriptor.hitsAddend !== undefined)
      out["hitsAddend"] = Number(descriptor.hitsAddend);
    if (descriptor.isNegativeHits) out["isNegativeHits"] = true;
    const override = descriptor.limit;
    if (override !== undefined) {
      // Go's text format prints an unknown enum number as the number.
      const unit =
        override.unit in OverrideRateLimitUnit
          ? OverrideRateLimitUnit[override.unit]
          : String(override.unit);
      out["limit"] =
        `requests_per_unit:${override.requestsPerUnit} unit:${unit}`;
    }
    return out;
  });
  const result: JsonObject = { descriptors, domain: request.domain };
  if (request.hitsAddend !== 0) result["hitsAddend"] = request.hitsAddend;
  let metadata: JsonObject | undefined;
  for (let i = 0; i < statuses.length; i++) {
    const limit = limits[i];
    if (limit?.metadata === undefined || statuses[i]!.code === Code.OVER_LIMIT)
      continue;
    metadata = mergeFirstWins(metadata ?? {}, limit.metadata);
  }
  if (metadata !== undefined && Object.keys(metadata).length > 0) {
    result["metadata"] = sortKeys(metadata);
  }
  return result;
}

function isObject(value: JsonValue | undefined): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Adds `source`'s keys missing from `target`; two objects under one key merge recursively. */
function mergeFirstWins(target: JsonObject, source: JsonObject): JsonObject {
  for (const [key, value] of Object.entries(source)) {
    const existing = target[key];
    if (existing === undefined) {
      target[key] = isObject(value) ? mergeFirstWins({}, value) : value;
    } else if (isObject(existing) && isObject(value)) {
      mergeFirstWins(existing, value);
    }
  }
  return target;
}

/** A copy with every object's keys in sorted order (Go prints maps sorted). */
function sortKeys(value: JsonValue): JsonValue {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (!isObject(value)) return value;
  const out: JsonObject = {};
  for (const key of Object.keys(value).sort()) out[key] = sortKeys(value[key]!);
  return out;
}
