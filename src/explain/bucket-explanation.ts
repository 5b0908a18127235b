// Explain for RLQS buckets (`ExplainBucket`, `ListBuckets`): the RLQS service's read-only
// snapshot of a bucket (rlqs/bucket-snapshot.ts) as an `ExplainBucketResponse`, with the match
// path and rule the bucket's ordered entries meet in the config, as Explain shows them for a
// request descriptor.

import { create } from "@bufbuild/protobuf";
import type { RateLimitConfig } from "../config/rate-limit-config.js";
import {
  BucketPolicy,
  BucketPolicyReason,
  BucketStreamSchema,
  ExplainBucketResponseSchema,
  ListBucketsResponseSchema,
  RateLimitDescriptorSchema,
  RateLimitDescriptor_EntrySchema,
  type ExplainBucketRequest,
  type ExplainBucketResponse,
  type ListBucketsRequest,
  type ListBucketsResponse,
} from "../proto.js";
import { assignmentStrategy } from "../rlqs/assignment.js";
import type { BucketSnapshot } from "../rlqs/bucket-snapshot.js";
import type { RlqsService } from "../rlqs/rlqs-service.js";
import { NotReadyError, RequestError } from "../service/errors.js";
import { defaultRequestBounds } from "../service/request-bounds.js";
import { explainLimit } from "./descriptor-explanation.js";
import { matchPathMessages, ruleMessage } from "./explain-message.js";
import { timestampFromUs } from "./explain-time.js";

/** The RLQS service as bucket explanations read it. */
export type BucketSnapshots = Pick<
  RlqsService,
  "describeBucket" | "listBuckets"
>;

/** Options of {@link createBucketExplainService}. */
export interface BucketExplainServiceOptions {
  /** The RLQS service whose buckets are explained. */
  readonly rlqs: BucketSnapshots;
  /** The config in force (for the match path and the rule). */
  readonly currentConfig: () => RateLimitConfig | undefined;
  /** Most buckets one `ListBuckets` answer describes. @defaultValue 1000 */
  readonly maxListedBuckets?: number;
  /**
   * Most entries an `ExplainBucket` bucket may have (more are refused, as ShouldRateLimit
   * refuses a descriptor with more than `REQUEST_MAX_ENTRIES`).
   * @defaultValue 100, `REQUEST_MAX_ENTRIES`' default
   */
  readonly maxEntries?: number;
}

/** `ExplainBucket` and `ListBuckets` of `ratelimit.explain.v1.ExplainService`. */
export interface BucketExplainService {
  /**
   * Explains one bucket: its entries in tree order, match path, rule, policy with its reason,
   * L and the current split per stream. Reads only.
   *
   * @throws {@link RequestError} without a domain or a bucket entry, or with more than
   *   `maxEntries` entries
   * @throws {@link NotReadyError} before any config has loaded
   */
  explainBucket(request: ExplainBucketRequest): Promise<ExplainBucketResponse>;
  /**
   * Explains every bucket this replica's streams hold (one domain's when the request names
   * it), sorted by domain then entries, at most `maxListedBuckets`.
   *
   * @throws {@link NotReadyError} before any config has loaded
   */
  listBuckets(request: ListBucketsRequest): Promise<ListBucketsResponse>;
}

/** Rounds a rate to a thousandth of a request per second for one-line summaries. */
function rateText(perSecond: number): string {
  return `${Math.round(perSecond * 1000) / 1000}/s`;
}

function entriesText(entries: BucketSnapshot["entries"]): string {
  return entries.map(([key, value]) => `${key}=${value}`).join(",");
}

/** The policy and reason fields, and the summary line, of a snapshot. */
function policyFields(s: BucketSnapshot): {
  policy: BucketPolicy;
  reason: BucketPolicyReason;
  summary: string;
} {
  const p = s.policy;
  const streams = `${s.streams.length} stream${s.streams.length === 1 ? "" : "s"}`;
  if (p.kind === "allow_all") {
    switch (p.reason) {
      case "unknown_domain":
        return {
          policy: BucketPolicy.ALLOW_ALL,
          reason: BucketPolicyReason.UNKNOWN_DOMAIN,
          summary: `ALLOW_ALL: domain ${s.domain} is not loaded`,
        };
      case "no_rule":
        return {
          policy: BucketPolicy.ALLOW_ALL,
          reason: BucketPolicyReason.NO_RULE,
          summary: `ALLOW_ALL: no rule of domain ${s.domain} is reached by ${entriesText(s.entries)}`,
        };
      case "unlimited":
        return {
          policy: BucketPolicy.ALLOW_ALL,
          reason: BucketPolicyReason.UNLIMITED,
          summary: `ALLOW_ALL: ${p.rule} is unlimited`,
        };
    }
  }
  const shared = `L = ${rateText(p.ratePerSecond)} (${p.rule})`;
  if (p.shadow)
    return {
      policy: BucketPolicy.ALLOW_ALL,
      reason: BucketPolicyReason.SHADOW_MODE,
      summary:
        `ALLOW_ALL: shadow mode${s.globalShadowMode ? " (SHADOW_MODE)" : ""}; ` +
        (p.ratePerSecond > 0
          ? `${shared} would be shared by ${streams}`
          : `${p.rule} would be DENY_ALL`),
    };
  if (p.ratePerSecond <= 0)
    return {
      policy: BucketPolicy.DENY_ALL,
      reason: BucketPolicyReason.ZERO,
      summary: `DENY_ALL: ${p.rule} allows 0 requests`,
    };
  return {
    policy: BucketPolicy.SHARED_LIMIT,
    reason: BucketPolicyReason.LIMIT,
    summary: `SHARED_LIMIT: ${shared} shared by ${streams}, shares sum to ${rateText(s.shareSumPerSecond)}`,
  };
}

/**
 * Builds the `ExplainBucketResponse` of a snapshot; the match path and rule come from `config`
 * (the walk Explain records for a request descriptor with the ordered entries).
 */
export function bucketExplanationMessage(
  snapshot: BucketSnapshot,
  config: RateLimitConfig | undefined,
): ExplainBucketResponse {
  const entries = snapshot.entries.map(([key, value]) =>
    create(RateLimitDescriptor_EntrySchema, { key, value }),
  );
  const view = config?.view;
  const explanation =
    view === undefined
      ? undefined
      : explainLimit(
          view,
          snapshot.domain,
          create(RateLimitDescriptorSchema, { entries }),
        );
  const limit = explanation?.limit;
  const { policy, reason, summary } = policyFields(snapshot);
  return create(ExplainBucketResponseSchema, {
    domain: snapshot.domain,
    entries,
    domainFound:
      snapshot.policy.kind !== "allow_all" ||
      snapshot.policy.reason !== "unknown_domain",
    path: explanation === undefined ? [] : matchPathMessages(explanation),
    ...(limit !== undefined && explanation !== undefined
      ? { rule: ruleMessage(limit, explanation, entries) }
      : {}),
    policy,
    reason,
    globalShadowMode: snapshot.globalShadowMode,
    limitPerSecond: snapshot.ratePerSecond,
    streams: snapshot.streams.map((s) =>
      create(BucketStreamSchema, {
        streamId: s.streamId,
        replica: s.replica ?? "",
        local: s.local,
        ...(s.demandPerSecond !== undefined
          ? { demandPerSecond: s.demandPerSecond }
          : {}),
        sharePerSecond: s.sharePerSecond,
        assignment: assignmentStrategy(s.assignment),
        ...(s.shadowAssignment !== undefined
          ? { shadowAssignment: assignmentStrategy(s.shadowAssignment) }
          : {}),
        assignedPerSecond: s.assignedPerSecond,
        ...(s.lastReportMs !== undefined
          ? { lastReportTime: timestampFromUs(s.lastReportMs * 1000) }
          : {}),
      }),
    ),
    shareSumPerSecond: snapshot.shareSumPerSecond,
    assignedSumPerSecond: snapshot.assignedSumPerSecond,
    ledger: snapshot.ledger,
    replica: snapshot.replica,
    ledgerError: snapshot.ledgerError ?? "",
    summary,
  });
}

/** Creates the bucket half of the Explain API over an RLQS service. */
export function createBucketExplainService(
  options: BucketExplainServiceOptions,
): BucketExplainService {
  const { rlqs, currentConfig } = options;
  const maxListed = options.maxListedBuckets ?? 1_000;
  const maxEntries = options.maxEntries ?? defaultRequestBounds.maxEntries;
  const notReady = (): NotReadyError =>
    new NotReadyError("no rate limit configuration loaded");

  return {
    async explainBucket(request) {
      if (request.domain === "")
        throw new RequestError("domain must not be empty");
      const entries = Object.keys(request.bucket).length;
      if (entries === 0)
        throw new RequestError(
          "bucket must have at least one entry (the BucketId's bucket map)",
        );
      if (entries > maxEntries)
        throw new RequestError(
          `bucket has ${entries} entries; at most ${maxEntries} are explained`,
        );
      const snapshot = await rlqs.describeBucket(
        request.domain,
        request.bucket,
      );
      if (snapshot === undefined) throw notReady();
      return bucketExplanationMessage(snapshot, currentConfig());
    },
    async listBuckets(request) {
      const list = await rlqs.listBuckets(request.domain, maxListed);
      if (list === undefined) throw notReady();
      const config = currentConfig();
      return create(ListBucketsResponseSchema, {
        buckets: list.buckets.map((b) => bucketExplanationMessage(b, config)),
        truncated: list.truncated,
      });
    },
  };
}
