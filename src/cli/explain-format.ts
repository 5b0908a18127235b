import { timestampDate } from "@bufbuild/protobuf/wkt";
import {
  DescriptorExplanation_Verdict as Verdict,
  MatchStep_Outcome as Outcome,
  RateLimitResponse_Code,
  RateLimitResponse_RateLimit_Unit,
  type DescriptorExplanation,
  type ExplainResponse,
  type MatchStep,
  type RateLimitRequest,
  type Rule,
  type Source,
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

function ruleText(rule: Rule): string {
  const parts: string[] = [rule.fullKey];
  if (rule.name !== "") parts.push(`name=${rule.name}`);
  if (rule.unlimited) parts.push("unlimited");
  else
    parts.push(
      `${rule.requestsPerUnit} per ${rule.unitMultiplier > 1 ? `${rule.unitMultiplier} ` : ""}${RateLimitResponse_RateLimit_Unit[rule.unit]}` +
        (rule.unitMultiplier > 1 ? ` (${rule.windowSeconds}s window)` : ""),
    );
  if (rule.slidingWindow) parts.push("sliding_window");
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
  const items: string[] = [];
  d.path.forEach((step) => {
    items.push(`path[${step.entryIndex}]: ${stepText(step)}`);
  });
  if (d.rule !== undefined) items.push(`rule: ${ruleText(d.rule)}`);
  if (d.replacedBy !== "") items.push(`replaced by: ${d.replacedBy}`);
  if (d.replacedNames.length > 0)
    items.push(`replaces: ${d.replacedNames.join(", ")}`);
  const c = d.counter;
  if (c !== undefined) {
    const start =
      c.windowStart !== undefined ? timestampDate(c.windowStart) : undefined;
    const end =
      c.windowEnd !== undefined ? timestampDate(c.windowEnd) : undefined;
    items.push(
      `counter: ${c.key} = ${c.value} → ${c.valueAfter}` +
        (start !== undefined && end !== undefined
          ? ` (window ${start.toISOString()} .. ${end.toISOString()})`
          : "") +
        (c.localCacheHit ? " [local cache]" : ""),
    );
    if (c.previousKey !== "")
      items.push(
        `previous window: ${c.previousKey} = ${c.previousValue}, weighs ${c.previousWeight}; weighted count with this request ${c.comparedCount}`,
      );
  }
  if (d.counter !== undefined) items.push(`hits addend: ${d.hitsAddend}`);
  const status = d.status;
  let decision = verdictText[d.verdict];
  if (status !== undefined && d.verdict !== Verdict.UNSPECIFIED) {
    decision += ` → ${RateLimitResponse_Code[status.code]}`;
    if (status.currentLimit !== undefined) {
      decision += `, ${status.limitRemaining} remaining`;
      if (status.durationUntilReset !== undefined)
        decision += `, resets in ${status.durationUntilReset.seconds}s`;
    }
  }
  items.push(`decision: ${decision}${mark}`);
  for (const note of d.notes) items.push(`note: ${note}`);
  items.forEach((item, i) => {
    lines.push(`${pad}${i === items.length - 1 ? "└─" : "├─"} ${item}`);
  });
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
