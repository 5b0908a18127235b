import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { Duration, Timestamp } from "@bufbuild/protobuf/wkt";
import {
  BucketPolicy,
  BucketPolicyReason,
  DescriptorExplanation_Verdict as Verdict,
  MatchStep_Outcome as Outcome,
  RateLimitResponse_Code,
  RateLimitResponse_RateLimit_Unit,
  RateLimitStrategy_BlanketRule,
  type BucketStream,
  type CalendarPeriod,
  type ExplainBucketResponse,
  type Counter,
  type DescriptorExplanation,
  type ExplainResponse,
  type LimitCheck,
  type MatchStep,
  type RateLimitRequest,
  type RateLimitResponse_DescriptorStatus,
  type RateLimitStrategy,
  type Rule,
  type Source,
  type TokenBucketState,
} from "../proto.js";

const outcomeText: Record<Outcome, string> = {
  [Outcome.UNSPECIFIED]: "?",
  [Outcome.EXACT]: "exact value",
  [Outcome.WILDCARD]: "wildcard",
  [Outcome.KEY_ONLY]: "key-only default",
  [Outcome.WHITELISTED]: "whitelisted value (no rate limit)",
  [Outcome.NO_SUCH_KEY]: "no such key: stop, no limit",
  [Outcome.DEEPER_THAN_CONFIG]: "deeper than the config: stop, no limit",
  [Outcome.UNKNOWN_DOMAIN]: "unknown domain: no limit",
  [Outcome.OVERRIDE]: "request limit override: config not consulted",
};

const verdictText: Record<Verdict, string> = {
  [Verdict.UNSPECIFIED]: "limited (counters not read)",
  [Verdict.NO_LIMIT]: "no limit applies",
  [Verdict.UNLIMITED]: "unlimited",
  [Verdict.REPLACED]: "replaced",
  [Verdict.WITHIN_LIMIT]: "within limit",
  [Verdict.NEAR_LIMIT]: "near limit",
  [Verdict.OVER_LIMIT]: "OVER LIMIT",
  [Verdict.OVER_LIMIT_SHADOW]: "over limit (shadow mode: answered OK)",
};

/** `name:line`, `name@version`, or "" when unknown. */
function sourceText(source: Source | undefined): string {
  if (source === undefined || source.name === "") return "";
  if (source.version !== "") return `${source.name}@${source.version}`;
  return source.line > 0 ? `${source.name}:${source.line}` : source.name;
}

/**
 * One limit as configured: `10 per SECOND`, `3 per 10 MINUTE (600s window) sliding_window`,
 * `10 per SECOND token_bucket burst 20`, `1000 per MONTH time_zone Europe/Berlin`.
 */
function limitText(rule: Rule): string {
  if (rule.unlimited) return "unlimited";
  let text =
    `${rule.requestsPerUnit} per ${rule.unitMultiplier > 1 ? `${rule.unitMultiplier} ` : ""}${RateLimitResponse_RateLimit_Unit[rule.unit]}` +
    (rule.unitMultiplier > 1 ? ` (${rule.windowSeconds}s window)` : "");
  if (rule.slidingWindow) text += " sliding_window";
  if (rule.tokenBucket !== undefined)
    text += ` token_bucket burst ${rule.tokenBucket.burst}`;
  if (rule.timeZone !== "") text += ` time_zone ${rule.timeZone}`;
  if (rule.weekStart !== "") text += ` week_start ${rule.weekStart}`;
  return text;
}

/**
 * The rule line: its full key, name, limit (or, for a `rate_limits:` list, how many limits it
 * has: each gets its own line), flags and source.
 */
function ruleText(rule: Rule, listSize: number): string {
  const parts: string[] = [rule.fullKey];
  if (listSize > 0) parts.push(`rate_limits: ${listSize} limits`);
  else {
    if (rule.name !== "") parts.push(`name=${rule.name}`);
    parts.push(limitText(rule));
  }
  if (rule.allOrNothing) parts.push("charge: all_or_nothing");
  if (rule.shadowMode) parts.push("shadow_mode");
  if (rule.quotaMode) parts.push("quota_mode");
  if (rule.detailedMetric) parts.push("detailed_metric");
  if (rule.fromOverride) parts.push("(request override)");
  if (rule.replaces.length > 0)
    parts.push(`replaces [${rule.replaces.join(", ")}]`);
  if (rule.shareThreshold.length > 0)
    parts.push(`share_threshold ${rule.shareThreshold.join(", ")}`);
  const source = sourceText(rule.source);
  return source === "" ? parts.join(" ") : `${parts.join(" ")}  (${source})`;
}

/** A Duration for people: `800ms`, `1.8s`, `12s`, `3d 04h 05m`. */
function durationText(duration: Duration | undefined): string {
  if (duration === undefined) return "0s";
  const ms = Number(duration.seconds) * 1000 + Math.round(duration.nanos / 1e6);
  if (ms < 1000) return `${ms}ms`;
  if (ms < 10_000 && ms % 1000 !== 0)
    return `${(ms / 1000).toFixed(3).replace(/0+$/, "")}s`;
  return secondsText(Math.ceil(ms / 1000));
}

/** Whole seconds for people: `42s`, `5m 03s`, `2h 05m 03s`, `3d 04h 05m`. */
export function secondsText(total: number): string {
  const s = Math.max(0, Math.floor(total));
  const days = Math.floor(s / 86400);
  const hours = Math.floor((s % 86400) / 3600);
  const minutes = Math.floor((s % 3600) / 60);
  const seconds = s % 60;
  const pad = (n: number): string => String(n).padStart(2, "0");
  if (days > 0) return `${days}d ${pad(hours)}h ${pad(minutes)}m`;
  if (hours > 0) return `${hours}h ${pad(minutes)}m ${pad(seconds)}s`;
  if (minutes > 0) return `${minutes}m ${pad(seconds)}s`;
  return `${seconds}s`;
}

function isoText(t: Timestamp | undefined): string {
  return t === undefined ? "?" : timestampDate(t).toISOString();
}

/**
 * The token-bucket line: `token bucket: <key> 10 per SECOND, burst 20: 13 left → 12, full in
 * 800ms (TAT … → …)`; a refusal says when the same request fits.
 */
function bucketText(b: TokenBucketState, rule: Rule | undefined): string {
  const rate =
    rule === undefined
      ? ""
      : ` ${rule.requestsPerUnit} per ${rule.unitMultiplier > 1 ? `${rule.unitMultiplier} ` : ""}${RateLimitResponse_RateLimit_Unit[rule.unit]}` +
        (rule.tokenBucket !== undefined
          ? `, burst ${rule.tokenBucket.burst}`
          : "");
  let text = `token bucket: ${b.key}${rate}: `;
  if (b.exceedsBurst)
    text += `${b.remaining} left; refused: the hits exceed the burst`;
  else if (!b.admitted)
    text += `${b.remaining} left; refused, fits in ${durationText(b.retryAfter)}`;
  else if (b.remainingAfter === b.remaining) text += `${b.remaining} left`;
  else text += `${b.remaining} left → ${b.remainingAfter}`;
  text += `, full in ${durationText(b.untilFull)}`;
  const interval =
    rule?.tokenBucket?.emissionInterval === undefined
      ? ""
      : `; one hit every ${durationText(rule.tokenBucket.emissionInterval)}`;
  const tat =
    isoText(b.tat) === isoText(b.tatAfter)
      ? `TAT ${isoText(b.tat)}`
      : `TAT ${isoText(b.tat)} → ${isoText(b.tatAfter)}`;
  return `${text} (${tat}${interval})`;
}

/**
 * The calendar line: `calendar: month in Europe/Berlin (2026-11, resets
 * 2026-12-01T00:00:00+01:00, in 3d 10h 59m)`.
 */
function periodText(p: CalendarPeriod, rule: Rule | undefined): string {
  const unit =
    rule === undefined
      ? "period"
      : RateLimitResponse_RateLimit_Unit[rule.unit].toLowerCase();
  const week =
    rule !== undefined && rule.weekStart !== ""
      ? ` from ${rule.weekStart}`
      : "";
  return `calendar: ${unit}${week} in ${p.timeZone} (${p.label}, resets ${p.end}, in ${secondsText(Number(p.secondsLeft))})`;
}

/** The counter lines: the counter, the previous window's, the calendar period. */
function counterItems(c: Counter, rule: Rule | undefined): Item[] {
  const items: Item[] = [];
  const start =
    c.windowStart !== undefined ? timestampDate(c.windowStart) : undefined;
  const end =
    c.windowEnd !== undefined ? timestampDate(c.windowEnd) : undefined;
  items.push(
    item(
      `counter: ${c.key} = ${c.value} → ${c.valueAfter}` +
        (start !== undefined && end !== undefined
          ? ` (window ${start.toISOString()} .. ${end.toISOString()})`
          : "") +
        (c.localCacheHit ? " [local cache]" : ""),
    ),
  );
  if (c.previousKey !== "")
    items.push(
      item(
        `previous window: ${c.previousKey} = ${c.previousValue}, weighs ${c.previousWeight}; weighted count with this request ${c.comparedCount}`,
      ),
    );
  if (c.period !== undefined) items.push(item(periodText(c.period, rule)));
  return items;
}

/** `within limit → OK, 3 remaining, resets in 35s` (`full in` for token buckets). */
function decisionText(
  verdict: Verdict,
  status: RateLimitResponse_DescriptorStatus | undefined,
  bucket: boolean,
): string {
  let decision = verdictText[verdict];
  if (status !== undefined && verdict !== Verdict.UNSPECIFIED) {
    decision += ` → ${RateLimitResponse_Code[status.code]}`;
    if (status.currentLimit !== undefined) {
      decision += `, ${status.limitRemaining} remaining`;
      if (status.durationUntilReset !== undefined)
        decision += `, ${bucket ? "full" : "resets"} in ${status.durationUntilReset.seconds}s`;
    }
  }
  return decision;
}

/** One limit of a `rate_limits:` list: its spec, then its counter or bucket and decision. */
function limitCheckItem(l: LimitCheck): Item {
  const rule = l.rule;
  const label =
    rule === undefined
      ? ""
      : rule.name !== ""
        ? ` ${rule.name}`
        : rule.statsKeySuffix !== ""
          ? ` ${rule.statsKeySuffix.replace(/^_/, "")}`
          : "";
  const children: Item[] = [];
  if (l.counter !== undefined) children.push(...counterItems(l.counter, rule));
  if (l.bucket !== undefined) children.push(item(bucketText(l.bucket, rule)));
  if (l.verdict !== Verdict.UNSPECIFIED)
    children.push(
      item(
        `decision: ${decisionText(l.verdict, l.status, l.bucket !== undefined)}`,
      ),
    );
  for (const note of l.notes) children.push(item(`note: ${note}`));
  return item(
    `limits[${l.index}]${label}: ${rule === undefined ? "?" : limitText(rule)}${l.deciding ? "  ◀ this limit decides" : ""}`,
    children,
  );
}

/** A line of the tree and the lines under it. */
interface Item {
  readonly text: string;
  readonly children: readonly Item[];
}

function item(text: string, children: readonly Item[] = []): Item {
  return { text, children };
}

/** Renders items under `pad`, each with `├─`/`└─` and its children indented below it. */
function renderItems(
  items: readonly Item[],
  pad: string,
  lines: string[],
): void {
  items.forEach((it, i) => {
    const last = i === items.length - 1;
    lines.push(`${pad}${last ? "└─" : "├─"} ${it.text}`);
    renderItems(it.children, pad + (last ? "   " : "│  "), lines);
  });
}

function stepText(step: MatchStep): string {
  const entry =
    step.outcome === Outcome.UNKNOWN_DOMAIN || step.outcome === Outcome.OVERRIDE
      ? ""
      : `${step.key}=${step.value} `;
  let text = `${entry}→ ${outcomeText[step.outcome]}`;
  if (step.node !== "") text += ` ${step.node}`;
  if (step.wildcardsTried.length > 0)
    text += ` (wildcards tried: ${step.wildcardsTried.join(", ")})`;
  const source = sourceText(step.source);
  if (source !== "") text += `  (${source})`;
  return text;
}

function descriptorLines(
  d: DescriptorExplanation,
  label: string,
  last: boolean,
): string[] {
  const lines: string[] = [];
  const mark = d.deciding ? "  ◀ decides" : "";
  lines.push(`${last ? "└─" : "├─"} descriptors[${d.index}] ${label}${mark}`);
  const pad = last ? "   " : "│  ";
  const items: Item[] = [];
  d.path.forEach((step) => {
    items.push(item(`path[${step.entryIndex}]: ${stepText(step)}`));
  });
  const list = d.limits.length > 0;
  if (d.rule !== undefined)
    items.push(item(`rule: ${ruleText(d.rule, d.limits.length)}`));
  if (d.replacedBy !== "") items.push(item(`replaced by: ${d.replacedBy}`));
  if (d.replacedNames.length > 0)
    items.push(item(`replaces: ${d.replacedNames.join(", ")}`));
  if (list) items.push(...d.limits.map(limitCheckItem));
  else {
    if (d.counter !== undefined) items.push(...counterItems(d.counter, d.rule));
    if (d.bucket !== undefined) items.push(item(bucketText(d.bucket, d.rule)));
  }
  if (d.counter !== undefined || d.bucket !== undefined)
    items.push(item(`hits addend: ${d.hitsAddend}`));
  const deciding = list ? d.limits.find((l) => l.deciding) : undefined;
  const bucket = list ? deciding?.bucket !== undefined : d.bucket !== undefined;
  items.push(
    item(`decision: ${decisionText(d.verdict, d.status, bucket)}${mark}`),
  );
  for (const note of d.notes) items.push(item(`note: ${note}`));
  renderItems(items, pad, lines);
  return lines;
}

/**
 * Renders an explanation as a tree, one line per step, the deciding descriptor marked
 * `◀ decides`.
 */
export function formatExplanation(
  response: ExplainResponse,
  request: RateLimitRequest,
): string {
  const mode =
    response.backend === "none"
      ? "offline"
      : response.charged
        ? "charged"
        : "read only, nothing charged";
  const lines = [
    `domain ${request.domain} (backend ${response.backend}, ${mode})${response.domainFound ? "" : ": domain not loaded"}`,
  ];
  response.descriptors.forEach((d, i) => {
    const entries = request.descriptors[i]?.entries ?? [];
    const label = entries.map((e) => `${e.key}=${e.value}`).join(",");
    lines.push(
      ...descriptorLines(d, label, i === response.descriptors.length - 1),
    );
  });
  if (response.backend !== "none") {
    lines.push(
      `overall: ${RateLimitResponse_Code[response.overallCode]}${response.globalShadowMode ? " (SHADOW_MODE)" : ""}`,
    );
    if (response.allOrNothing)
      lines.push(
        response.allOrNothingRefused
          ? "charge: all_or_nothing: refused, no counter is charged"
          : "charge: all_or_nothing: every counter is charged",
      );
  }
  if (response.summary !== "") lines.push(response.summary);
  return lines.join("\n");
}

/** A rate for people: at most three decimals, `81.818/s`. */
function perSecondText(perSecond: number): string {
  return `${Math.round(perSecond * 1000) / 1000}/s`;
}

/** `token bucket 81 per 1s, max_tokens 9`, or the blanket rule's name. */
function strategyText(strategy: RateLimitStrategy | undefined): string {
  const s = strategy?.strategy;
  if (s?.case === "tokenBucket")
    return `token bucket ${s.value.tokensPerFill ?? 0} per ${durationText(s.value.fillInterval)}, max_tokens ${s.value.maxTokens}`;
  if (s?.case === "blanketRule") return RateLimitStrategy_BlanketRule[s.value];
  return "nothing";
}

/** `BUCKET_POLICY_REASON_SHADOW_MODE` → `shadow mode`. */
function reasonText(reason: BucketPolicyReason): string {
  return BucketPolicyReason[reason].toLowerCase().replace(/_/g, " ");
}

/** One stream's line: its demand, share and the token bucket for it. */
function bucketStreamText(s: BucketStream, responder: string): string {
  const where = s.local
    ? responder === ""
      ? ""
      : " (this replica)"
    : s.replica !== ""
      ? ` (replica ${s.replica})`
      : " (another replica)";
  const demand =
    s.demandPerSecond === undefined
      ? "not measured yet"
      : perSecondText(s.demandPerSecond);
  let text = `stream ${s.streamId}${where}: demand ${demand}, share ${perSecondText(s.sharePerSecond)} → ${strategyText(s.assignment)}`;
  if (s.shadowAssignment !== undefined)
    text += ` (shadow mode; enforced: ${strategyText(s.shadowAssignment)})`;
  if (s.lastReportTime !== undefined)
    text += `; last report ${isoText(s.lastReportTime)}`;
  return text;
}

/**
 * Renders an `ExplainBucket` answer as a tree: the ordered entries' match path, the rule, the
 * policy with its reason, L, each stream's demand, share and token bucket, and the sums.
 */
export function formatBucketExplanation(
  response: ExplainBucketResponse,
): string {
  const entries = response.entries.map((e) => `${e.key}=${e.value}`).join(",");
  const where =
    response.replica === ""
      ? `ledger ${response.ledger}`
      : `ledger ${response.ledger}, replica ${response.replica}`;
  const lines = [
    `domain ${response.domain}${entries === "" ? "" : ` bucket ${entries}`} (${where})${response.domainFound ? "" : ": domain not loaded"}`,
  ];
  const items: Item[] = [];
  for (const step of response.path)
    if (step.outcome !== Outcome.UNKNOWN_DOMAIN)
      items.push(item(`path[${step.entryIndex}]: ${stepText(step)}`));
  if (response.rule !== undefined)
    items.push(item(`rule: ${ruleText(response.rule, 0)}`));
  items.push(
    item(
      `policy: ${BucketPolicy[response.policy]} (${reasonText(response.reason)}${response.globalShadowMode ? ", SHADOW_MODE" : ""})`,
    ),
  );
  if (response.limitPerSecond > 0)
    items.push(item(`L: ${perSecondText(response.limitPerSecond)}`));
  items.push(
    item(
      response.streams.length === 0
        ? "streams: none subscribed"
        : `streams: ${response.streams.length}`,
      response.streams.map((s) => item(bucketStreamText(s, response.replica))),
    ),
  );
  if (response.streams.length > 0 && response.limitPerSecond > 0)
    items.push(
      item(
        `shares sum to ${perSecondText(response.shareSumPerSecond)}; the token buckets admit ${perSecondText(response.assignedSumPerSecond)}`,
      ),
    );
  if (response.ledgerError !== "")
    items.push(
      item(
        `note: the kv store could not be read (${response.ledgerError}): this replica's streams and the demands last read from the others`,
      ),
    );
  renderItems(items, "", lines);
  if (response.summary !== "") lines.push(response.summary);
  return lines.join("\n");
}
