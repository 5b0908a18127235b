// The one builder of ShouldRateLimit requests and descriptors for tests: generated messages
// (gRPC, Connect, in-process calls) and the same request as a `/json` body, so a test says
// which entries, hits and limits it sends and not how the messages are assembled.

import { create, toJsonString } from "@bufbuild/protobuf";
import {
  RateLimitDescriptorSchema,
  RateLimitRequestSchema,
  type OverrideRateLimitUnit,
  type RateLimitDescriptor,
  type RateLimitRequest,
} from "../../src/proto.js";

/** One descriptor entry as `[key, value]` (upstream `RateLimitDescriptor.Entry`). */
export type Entry = readonly [key: string, value: string];

/** A descriptor with more than entries: its own hits, limit override or refund flag. */
export interface DescriptorSpec {
  /** The entries, in order (`entries`, field 1). */
  readonly entries: readonly Entry[];
  /**
   * The descriptor's own `hits_addend` (field 3, a `UInt64Value`): when set, even to 0, it
   * replaces the request's. Unset by default, so the request's applies.
   */
  readonly hits?: number | bigint;
  /**
   * The per-descriptor override (`limit`, field 2): `requestsPerUnit` per one `unit`
   * (an {@link OverrideRateLimitUnit}). Unset by default: the config's rule applies.
   */
  readonly limit?: {
    readonly requestsPerUnit: number;
    readonly unit: OverrideRateLimitUnit;
  };
  /** `is_negative_hits` (field 4): the hits are a refund. Default false. */
  readonly isNegativeHits?: boolean;
}

/**
 * What {@link request} takes per descriptor: its entries alone, a {@link DescriptorSpec}, or a
 * descriptor built already.
 */
export type DescriptorInput =
  readonly Entry[] | DescriptorSpec | RateLimitDescriptor;

/** The request-level fields of {@link request} besides its descriptors. */
export interface RequestSpec {
  /** `domain` (field 1). */
  readonly domain: string;
  /** The request's `hits_addend` (field 3, uint32). Default 0, which the service reads as 1. */
  readonly hitsAddend?: number;
}

function isEntries(input: DescriptorInput): input is readonly Entry[] {
  return Array.isArray(input);
}

function isSpec(arg: Entry | DescriptorSpec): arg is DescriptorSpec {
  return !Array.isArray(arg);
}

/**
 * Returns a `RateLimitDescriptor` of the given entries, in order: `descriptor(["user", "bob"])`,
 * `descriptor(["a", "1"], ["b", "2"])`, or from a {@link DescriptorSpec} for hits, a limit
 * override or a refund: `descriptor({ entries: [["k", "v"]], hits: 3 })`. No entry is checked:
 * tests send empty and malformed ones on purpose.
 */
export function descriptor(...entries: readonly Entry[]): RateLimitDescriptor;
export function descriptor(spec: DescriptorSpec): RateLimitDescriptor;
export function descriptor(
  ...args: readonly (Entry | DescriptorSpec)[]
): RateLimitDescriptor {
  const first = args[0];
  if (args.length === 1 && first !== undefined && isSpec(first))
    return fromSpec(first);
  return fromSpec({ entries: args as readonly Entry[] });
}

function fromSpec(spec: DescriptorSpec): RateLimitDescriptor {
  return create(RateLimitDescriptorSchema, {
    entries: spec.entries.map(([key, value]) => ({ key, value })),
    ...(spec.limit === undefined ? {} : { limit: spec.limit }),
    ...(spec.hits === undefined ? {} : { hitsAddend: BigInt(spec.hits) }),
    ...(spec.isNegativeHits === undefined
      ? {}
      : { isNegativeHits: spec.isNegativeHits }),
  });
}

function toDescriptor(input: DescriptorInput): RateLimitDescriptor {
  if (isEntries(input)) return fromSpec({ entries: input });
  return "$typeName" in input ? input : fromSpec(input);
}

/**
 * Returns a `RateLimitRequest` for `domain` (or a {@link RequestSpec} with the request's
 * `hitsAddend`) with one descriptor per further argument, in order:
 * `request("rl", [["user", "bob"]], [["path", "/a"], ["method", "GET"]])` is two descriptors,
 * the second of two entries; `request({ domain: "rl", hitsAddend: 5 }, [["k", "v"]])`
 * asks for 5 hits.
 */
export function request(
  domain: string | RequestSpec,
  ...descriptors: readonly DescriptorInput[]
): RateLimitRequest {
  const spec = typeof domain === "string" ? { domain } : domain;
  return create(RateLimitRequestSchema, {
    domain: spec.domain,
    hitsAddend: spec.hitsAddend ?? 0,
    descriptors: descriptors.map(toDescriptor),
  });
}

/**
 * Returns the same request as {@link request} as a `/json` body: proto3 JSON with the fields'
 * JSON names (`hitsAddend`, `isNegativeHits`), as Envoy's HTTP client and the reference's
 * `/json` handler take it. Fields at their default are left out.
 */
export function jsonRequest(
  domain: string | RequestSpec,
  ...descriptors: readonly DescriptorInput[]
): string {
  return toJsonString(RateLimitRequestSchema, request(domain, ...descriptors));
}
