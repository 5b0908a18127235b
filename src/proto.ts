/**
 * The only importer of `gen/`: explicit named re-exports of the generated schemas, types and
 * enums the service uses. Two upstream packages both declare `RateLimitDescriptor` and
 * `RateLimitUnit`; the ratelimit-config ones are re-exported with a `Config` prefix. Envoy's
 * `envoy.type.v3.TokenBucket` (RLQS) is re-exported with an `Envoy` prefix beside Explain's.
 */
export {
  RateLimitService,
  RateLimitRequestSchema,
  RateLimitResponseSchema,
  RateLimitResponse_Code,
  RateLimitResponse_DescriptorStatusSchema,
  RateLimitResponse_RateLimitSchema,
  RateLimitResponse_RateLimit_Unit,
  RateLimitResponse_RateLimit_UnitSchema,
  type RateLimitRequest,
  type RateLimitResponse,
  type RateLimitResponse_DescriptorStatus,
  type RateLimitResponse_RateLimit,
} from "../gen/envoy/service/ratelimit/v3/rls_pb.js";
export {
  RateLimitDescriptorSchema,
  RateLimitDescriptor_EntrySchema,
  RateLimitDescriptor_RateLimitOverrideSchema,
  type RateLimitDescriptor,
  type RateLimitDescriptor_Entry,
  type RateLimitDescriptor_RateLimitOverride,
} from "../gen/envoy/extensions/common/ratelimit/v3/ratelimit_pb.js";
export { RateLimitUnit as OverrideRateLimitUnit } from "../gen/envoy/type/v3/ratelimit_unit_pb.js";
export {
  HeaderValueSchema,
  NodeSchema,
  type HeaderValue,
  type Node,
} from "../gen/envoy/config/core/v3/base_pb.js";
export { AggregatedDiscoveryService } from "../gen/envoy/service/discovery/v3/ads_pb.js";
export {
  DiscoveryRequestSchema,
  DiscoveryResponseSchema,
  type DiscoveryRequest,
  type DiscoveryResponse,
} from "../gen/envoy/service/discovery/v3/discovery_pb.js";
export { StatusSchema, type Status } from "../gen/google/rpc/status_pb.js";
export {
  RateLimitConfigSchema as ConfigRateLimitConfigSchema,
  RateLimitDescriptorSchema as ConfigRateLimitDescriptorSchema,
  RateLimitPolicySchema as ConfigRateLimitPolicySchema,
  RateLimitUnit as ConfigRateLimitUnit,
  RateLimitAlgorithm as ConfigRateLimitAlgorithm,
  ChargeMode as ConfigChargeMode,
  type RateLimitConfig as ConfigRateLimitConfig,
  type RateLimitDescriptor as ConfigRateLimitDescriptor,
  type RateLimitPolicy as ConfigRateLimitPolicy,
} from "../gen/ratelimit/config/ratelimit/v3/rls_conf_pb.js";
export {
  Health,
  HealthCheckRequestSchema,
  HealthCheckResponseSchema,
  HealthCheckResponse_ServingStatus,
  HealthListResponseSchema,
  type HealthCheckResponse,
} from "../gen/grpc/health/v1/health_pb.js";
export {
  ExplainService,
  ExplainRequestSchema,
  ExplainResponseSchema,
  DescriptorExplanationSchema,
  DescriptorExplanation_Verdict,
  MatchStepSchema,
  MatchStep_Outcome,
  RuleSchema,
  CounterSchema,
  SourceSchema,
  TokenBucketSchema,
  TokenBucketStateSchema,
  CalendarPeriodSchema,
  LimitCheckSchema,
  ExplainBucketRequestSchema,
  ExplainBucketResponseSchema,
  BucketStreamSchema,
  ListBucketsRequestSchema,
  ListBucketsResponseSchema,
  BucketPolicy,
  BucketPolicyReason,
  type ExplainBucketRequest,
  type ExplainBucketResponse,
  type BucketStream,
  type ListBucketsRequest,
  type ListBucketsResponse,
  type ExplainRequest,
  type ExplainResponse,
  type DescriptorExplanation,
  type MatchStep,
  type Rule,
  type Counter,
  type Source,
  type TokenBucket,
  type TokenBucketState,
  type CalendarPeriod,
  type LimitCheck,
} from "../gen/ratelimit/explain/v1/explain_pb.js";
export {
  RateLimitQuotaService,
  RateLimitQuotaUsageReportsSchema,
  RateLimitQuotaUsageReports_BucketQuotaUsageSchema,
  RateLimitQuotaResponseSchema,
  RateLimitQuotaResponse_BucketActionSchema,
  RateLimitQuotaResponse_BucketAction_QuotaAssignmentActionSchema,
  RateLimitQuotaResponse_BucketAction_AbandonActionSchema,
  BucketIdSchema,
  type RateLimitQuotaUsageReports,
  type RateLimitQuotaUsageReports_BucketQuotaUsage,
  type RateLimitQuotaResponse,
  type RateLimitQuotaResponse_BucketAction,
  type BucketId,
} from "../gen/envoy/service/rate_limit_quota/v3/rlqs_pb.js";
export {
  RateLimitStrategySchema,
  RateLimitStrategy_BlanketRule,
  type RateLimitStrategy,
} from "../gen/envoy/type/v3/ratelimit_strategy_pb.js";
export {
  TokenBucketSchema as EnvoyTokenBucketSchema,
  type TokenBucket as EnvoyTokenBucket,
} from "../gen/envoy/type/v3/token_bucket_pb.js";
export {
  AdminService,
  AuditRecordSchema,
  CanaryRuleReportSchema,
  DeleteOverrideResponseSchema,
  EntrySchema as AdminEntrySchema,
  GetAuditLogResponseSchema,
  GetCanaryReportResponseSchema,
  ListOverridesResponseSchema,
  OffenderSchema,
  OverrideLimitSchema,
  OverrideSchema,
  RuleOffendersSchema,
  SetOverrideResponseSchema,
  StartCanaryResponseSchema,
  StopCanaryResponseSchema,
  TopOffendersResponseSchema,
  type AuditRecord,
  type CanaryRuleReport,
  type ConfigFile,
  type DeleteOverrideRequest,
  type Entry as AdminEntry,
  type GetAuditLogRequest,
  type GetCanaryReportResponse,
  type ListOverridesRequest,
  type Offender,
  type Override,
  type OverrideLimit,
  type RuleOffenders,
  type SetOverrideRequest,
  type StartCanaryRequest,
  type TopOffendersRequest,
  type TopOffendersResponse,
} from "../gen/ratelimit/admin/v1/admin_pb.js";
