// The debug console's browser code: config tree, health, uptime, statistics, the last failed
// config reload, and an Explain form that calls ratelimit.explain.v1.ExplainService on this
// same origin with gRPC-web. Health, uptime, statistics, the loaded domains and the reload
// state are polled every few seconds (`?refresh=<seconds>`, 3 by default) while the tab is
// visible; the tree is rebuilt only when the config changes, and keeps which nodes are open.
// Bundled by scripts/build-console.mjs (esbuild) into dist/console/app.js; nothing is fetched
// from elsewhere at run time. The RLQS view (buckets and their splits) is rlqs-view.ts; the
// day-2 view (rule charts, top offenders, overrides, canary) is operations.ts.
import { createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import type { Duration, Timestamp } from "@bufbuild/protobuf/wkt";
import {
  DescriptorExplanation_Verdict as Verdict,
  ExplainService,
  MatchStep_Outcome as Outcome,
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
  type CalendarPeriod,
  type Counter,
  type DescriptorExplanation,
  type ExplainResponse,
  type LimitCheck,
  type RateLimitResponse_DescriptorStatus,
  type Rule,
  type TokenBucketState,
} from "../proto.js";
import { el } from "./dom.js";
import { mountOperations } from "./operations.js";
import { mountRlqsView } from "./rlqs-view.js";

/** One limit of a rule, as `/console/state.json` gives it (server/console.ts `ConsoleLimit`). */
interface LimitNode {
  name: string;
  unit: string;
  requestsPerUnit: number;
  unitMultiplier: number;
  windowSeconds: number;
  algorithm: string;
  burst?: number;
  emissionIntervalUs?: number;
  timeZone?: string;
  weekStart?: string;
  statsKeySuffix: string;
}
interface RuleNode {
  compositeKey: string;
  fullKey: string;
  limit?: {
    name: string;
    unit: string;
    requestsPerUnit: number;
    unlimited: boolean;
    replaces: string[];
  };
  flags: string[];
  source: { name: string; line: number; version: string };
  children: RuleNode[];
  /** Every limit the rule checks (absent from servers before token buckets and lists). */
  limits?: LimitNode[];
  /** The rule has a `rate_limits:` list. */
  list?: boolean;
}
interface State {
  healthy: boolean;
  components: Record<string, boolean>;
  degraded: string[];
  uptimeSeconds: number;
  configLoaded: boolean;
  domains: { domain: string; rules: RuleNode[] }[];
  statistics: { name: string; value: number }[];
}
/** The JSON form of `/rlconfig` (`?format=json`), as far as the console reads it. */
interface ConfigReport {
  domains: string[];
  loadedAt: string | null;
  lastFailedReload: {
    file: string | null;
    line: number | null;
    fieldPath: string | null;
    message: string;
    time: string;
  } | null;
}

/** Default time between two refreshes of the state, in milliseconds. */
const defaultRefreshMs = 3000;

const client = createClient(
  ExplainService,
  createGrpcWebTransport({ baseUrl: window.location.origin }),
);

function byId(id: string): HTMLElement {
  const node = document.getElementById(id);
  if (node === null) throw new Error(`missing #${id}`);
  return node;
}

function sourceText(s: { name: string; line: number; version: string }) {
  if (s.version !== "") return `${s.name}@${s.version}`;
  return s.line > 0 ? `${s.name}:${s.line}` : s.name;
}

/** `3 / HOUR`, `10 / 5 SECOND sliding_window`, `10 / SECOND token_bucket burst 20`, `1000 / MONTH in Europe/Berlin`. */
function limitNodeText(l: LimitNode): string {
  let text = `${l.requestsPerUnit} / ${l.unitMultiplier > 1 ? `${l.unitMultiplier} ` : ""}${l.unit}`;
  if (l.algorithm === "sliding_window") text += " sliding_window";
  if (l.algorithm === "token_bucket" && l.burst !== undefined)
    text += ` token_bucket burst ${l.burst}`;
  if (l.timeZone !== undefined) text += ` in ${l.timeZone}`;
  if (l.weekStart !== undefined) text += ` from ${l.weekStart}`;
  return text;
}

function ruleElement(rule: RuleNode): HTMLElement {
  const summary = el(
    "summary",
    {},
    el("span", { class: "rule-key" }, rule.compositeKey),
  );
  const limit = rule.limit;
  const limits = rule.limits ?? [];
  if (limit !== undefined) {
    if (limit.unlimited || limits.length === 0) {
      const text = limit.unlimited
        ? "unlimited"
        : `${limit.requestsPerUnit} / ${limit.unit}`;
      summary.append(" ", el("span", { class: "limit" }, text));
    } else {
      if (rule.list === true)
        summary.append(" ", el("span", { class: "flag" }, "rate_limits"));
      limits.forEach((l, k) => {
        if (k > 0) summary.append(" ·");
        const label =
          rule.list === true && l.name !== ""
            ? `${l.name}: `
            : rule.list === true && l.statsKeySuffix !== ""
              ? `${l.statsKeySuffix.replace(/^_/, "")}: `
              : "";
        summary.append(
          " ",
          el(
            "span",
            {
              class: "limit",
              "data-algorithm": l.algorithm,
              ...(l.emissionIntervalUs !== undefined
                ? {
                    title: `one hit every ${microsText(l.emissionIntervalUs)}`,
                  }
                : {}),
            },
            label + limitNodeText(l),
          ),
        );
      });
    }
    if (limit.name !== "" && rule.list !== true)
      summary.append(el("span", { class: "flag" }, `name=${limit.name}`));
    if (limit.replaces.length > 0)
      summary.append(
        el("span", { class: "flag" }, `replaces ${limit.replaces.join(",")}`),
      );
  }
  for (const flag of rule.flags)
    summary.append(el("span", { class: "flag" }, flag));
  summary.append(" ", el("span", { class: "source" }, sourceText(rule.source)));
  const details = el("details", { "data-full-key": rule.fullKey }, summary);
  for (const child of rule.children) details.append(ruleElement(child));
  return details;
}

/** "800ms", "1.5s", "12s": microseconds for people. */
function microsText(us: number): string {
  if (us < 1000) return `${us}µs`;
  if (us < 1_000_000) return `${Math.round(us / 1000)}ms`;
  if (us < 10_000_000 && us % 1_000_000 !== 0)
    return `${(us / 1_000_000).toFixed(3).replace(/0+$/, "")}s`;
  return durationText(Math.ceil(us / 1_000_000));
}

function durationUs(d: Duration | undefined): number {
  return d === undefined ? 0 : Number(d.seconds) * 1_000_000 + d.nanos / 1000;
}

function isoText(t: Timestamp | undefined): string {
  return t === undefined
    ? "?"
    : new Date(Number(t.seconds) * 1000 + t.nanos / 1e6).toISOString();
}

/** "1h 02m 03s", "2m 05s", "7s": a whole number of seconds for people. */
function durationText(totalSeconds: number): string {
  const s = Math.max(0, Math.floor(totalSeconds));
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

/** Identifies a node of the tree across rebuilds: its domain or its rule's full key. */
function treeKey(details: Element): string | undefined {
  const domain = details.getAttribute("data-domain");
  if (domain !== null) return `domain ${domain}`;
  const fullKey = details.getAttribute("data-full-key");
  return fullKey === null ? undefined : `rule ${fullKey}`;
}

/** The tree as last rendered (JSON of the state's config part), to skip identical rebuilds. */
let renderedTree: string | undefined;

/**
 * Rebuilds the config tree when the config changed; the nodes open before stay open (matched
 * by domain and full key), so neither a refresh nor an Explain collapses what was expanded.
 */
function renderTree(state: State): void {
  const text = JSON.stringify([state.configLoaded, state.domains]);
  if (text === renderedTree) return;
  renderedTree = text;
  const tree = byId("config-tree");
  const open = new Set<string>();
  for (const details of tree.querySelectorAll("details[open]")) {
    const key = treeKey(details);
    if (key !== undefined) open.add(key);
  }
  tree.replaceChildren();
  if (!state.configLoaded) tree.append("no configuration loaded");
  for (const domain of state.domains) {
    const details = el(
      "details",
      { class: "domain", "data-domain": domain.domain },
      el("summary", {}, el("strong", {}, `domain ${domain.domain}`)),
    );
    for (const rule of domain.rules) details.append(ruleElement(rule));
    tree.append(details);
  }
  for (const details of tree.querySelectorAll("details")) {
    const key = treeKey(details);
    if (key !== undefined && open.has(key)) details.setAttribute("open", "");
  }
}

function renderState(state: State): void {
  const health = byId("health");
  const degraded = state.healthy && state.degraded.length > 0;
  health.textContent = !state.healthy
    ? "unhealthy"
    : degraded
      ? `degraded: ${state.degraded.join(", ")}`
      : "healthy";
  health.className = `badge ${!state.healthy ? "fail" : degraded ? "warn" : "ok"}`;
  health.title = Object.entries(state.components)
    .map(([name, ok]) => `${name}: ${ok ? "ok" : "failing"}`)
    .join(", ");
  const uptime = byId("uptime");
  uptime.textContent = `up ${durationText(state.uptimeSeconds)}`;
  uptime.setAttribute("data-seconds", String(state.uptimeSeconds));
  renderTree(state);
  const body = byId("statistics").querySelector("tbody");
  body?.replaceChildren(
    ...state.statistics.map((c) =>
      el(
        "tr",
        { "data-name": c.name },
        el("td", {}, c.name),
        el("td", { class: "value" }, String(c.value)),
      ),
    ),
  );
}

/** Fills the domain input's suggestions, keeping the list when it is unchanged. */
function renderDomains(domains: readonly string[]): void {
  const list = byId("domain-list");
  const current = [...list.querySelectorAll("option")].map((o) => o.value);
  if (current.join("\n") === domains.join("\n")) return;
  list.replaceChildren(
    ...domains.map((domain) => el("option", { value: domain })),
  );
}

/** Shows the config's load time and the last failed reload, when `/rlconfig` reports them. */
function renderConfigReport(report: ConfigReport | undefined): void {
  const loaded = byId("config-loaded");
  const loadedAt = report?.loadedAt ?? null;
  loaded.textContent = loadedAt === null ? "" : `loaded at ${loadedAt}`;
  const failed = byId("reload-error");
  const f = report?.lastFailedReload ?? null;
  if (f === null) {
    failed.hidden = true;
    failed.textContent = "";
    return;
  }
  const place =
    f.file === null
      ? ""
      : f.line === null
        ? `${f.file}: `
        : `${f.file}:${f.line}: `;
  const field = f.fieldPath === null ? "" : `${f.fieldPath}: `;
  failed.textContent = `last config reload failed at ${f.time}: ${place}${field}${f.message}`;
  failed.hidden = false;
}

const outcomeText: Record<Outcome, string> = {
  [Outcome.UNSPECIFIED]: "?",
  [Outcome.EXACT]: "exact value",
  [Outcome.WILDCARD]: "wildcard",
  [Outcome.KEY_ONLY]: "key-only default",
  [Outcome.WHITELISTED]: "whitelisted value",
  [Outcome.NO_SUCH_KEY]: "no such key (stop)",
  [Outcome.DEEPER_THAN_CONFIG]: "deeper than the config (stop)",
  [Outcome.UNKNOWN_DOMAIN]: "unknown domain",
  [Outcome.OVERRIDE]: "request override",
};

/** The rule's limit for the Explain result: `4 per MINUTE, sliding window`, … */
function ruleLimitText(rule: Rule): string {
  if (rule.unlimited) return "unlimited";
  return (
    `${rule.requestsPerUnit} per ${rule.unitMultiplier > 1 ? `${rule.unitMultiplier} ` : ""}${Unit[rule.unit]}` +
    (rule.slidingWindow ? ", sliding window" : "") +
    (rule.tokenBucket !== undefined
      ? `, token bucket burst ${rule.tokenBucket.burst} (one hit every ${microsText(durationUs(rule.tokenBucket.emissionInterval))})`
      : "") +
    (rule.timeZone !== ""
      ? `, calendar ${Unit[rule.unit].toLowerCase()} in ${rule.timeZone}${rule.weekStart !== "" ? ` from ${rule.weekStart}` : ""}`
      : "")
  );
}

/** The counter of a window limit, its previous window and its calendar period. */
function counterElements(c: Counter): HTMLElement[] {
  const out: HTMLElement[] = [
    el(
      "div",
      { class: "counter" },
      `counter ${c.key}: ${c.value} → ${c.valueAfter}`,
    ),
  ];
  if (c.previousKey !== "")
    out.push(
      el(
        "div",
        { class: "counter" },
        `previous window ${c.previousKey}: ${c.previousValue}, weighs ${c.previousWeight}; weighted count with this request ${c.comparedCount}`,
      ),
    );
  if (c.period !== undefined) out.push(periodElement(c.period));
  return out;
}

function periodElement(p: CalendarPeriod): HTMLElement {
  return el(
    "div",
    {
      class: "period",
      "data-label": p.label,
      "data-time-zone": p.timeZone,
      "data-end": p.end,
    },
    `period ${p.label} in ${p.timeZone}: ${p.start} .. ${p.end}, resets in ${durationText(Number(p.secondsLeft))}`,
  );
}

function bucketElement(b: TokenBucketState): HTMLElement {
  const left =
    b.admitted && b.remainingAfter !== b.remaining
      ? `${b.remaining} left → ${b.remainingAfter}`
      : `${b.remaining} left`;
  const refused = b.exceedsBurst
    ? "; refused: the hits exceed the burst"
    : !b.admitted
      ? `; refused, fits in ${microsText(durationUs(b.retryAfter))}`
      : "";
  return el(
    "div",
    {
      class: "bucket",
      "data-remaining": String(b.remaining),
      "data-remaining-after": String(b.remainingAfter),
      "data-admitted": String(b.admitted),
    },
    `token bucket ${b.key}: ${left}${refused}, full in ${microsText(durationUs(b.untilFull))} (TAT ${isoText(b.tat)}${isoText(b.tatAfter) !== isoText(b.tat) ? ` → ${isoText(b.tatAfter)}` : ""})`,
  );
}

function decisionElement(
  verdict: Verdict,
  status: RateLimitResponse_DescriptorStatus | undefined,
): HTMLElement {
  return el(
    "div",
    { class: "decision" },
    `decision: ${Verdict[verdict].toLowerCase().replace(/_/g, " ")}` +
      (status !== undefined ? ` (${Code[status.code]})` : ""),
  );
}

/**
 * What ShouldRateLimit answers (or would answer) in x-ratelimit-remaining and -reset: for a
 * token bucket the hits left of its burst and when it is full again.
 */
function remainingElement(
  status: RateLimitResponse_DescriptorStatus,
  burst: number | undefined,
): HTMLElement | undefined {
  if (status.currentLimit === undefined) return undefined;
  const resetSeconds = Number(status.durationUntilReset?.seconds ?? 0n);
  return el(
    "div",
    {
      class: "remaining",
      "data-remaining": String(status.limitRemaining),
      "data-reset-seconds": String(resetSeconds),
    },
    burst !== undefined
      ? `remaining ${status.limitRemaining} of burst ${burst}, full in ${durationText(resetSeconds)}`
      : `remaining ${status.limitRemaining} of ${status.currentLimit.requestsPerUnit}, resets in ${durationText(resetSeconds)}`,
  );
}

/** One limit of a `rate_limits:` list, with its own counter or bucket and decision. */
function limitCheckElement(l: LimitCheck): HTMLElement {
  const rule = l.rule;
  const label =
    rule === undefined
      ? ""
      : rule.name !== ""
        ? ` ${rule.name}`
        : rule.statsKeySuffix !== ""
          ? ` ${rule.statsKeySuffix.replace(/^_/, "")}`
          : "";
  const item = el(
    "li",
    {
      class: `limit-check${l.deciding ? " deciding" : ""}`,
      "data-index": String(l.index),
      "data-verdict": Verdict[l.verdict],
    },
    el(
      "strong",
      {},
      `limits[${l.index}]${label}: ${rule === undefined ? "?" : ruleLimitText(rule)}${l.deciding ? " — decides" : ""}`,
    ),
  );
  if (l.counter !== undefined) item.append(...counterElements(l.counter));
  if (l.bucket !== undefined) item.append(bucketElement(l.bucket));
  if (l.verdict !== Verdict.UNSPECIFIED) {
    item.append(decisionElement(l.verdict, l.status));
    const remaining =
      l.status === undefined
        ? undefined
        : remainingElement(l.status, rule?.tokenBucket?.burst);
    if (remaining !== undefined) item.append(remaining);
  }
  for (const note of l.notes) item.append(el("div", { class: "muted" }, note));
  return item;
}

function descriptorElement(d: DescriptorExplanation): HTMLElement {
  const section = el("div", {
    class: `descriptor${d.deciding ? " deciding" : ""}`,
    "data-index": String(d.index),
    "data-verdict": Verdict[d.verdict],
  });
  section.append(
    el(
      "strong",
      {},
      `descriptors[${d.index}]${d.deciding ? " — decides" : ""}`,
    ),
  );
  const path = el("ol", { class: "path" });
  for (const step of d.path) {
    const text =
      step.outcome === Outcome.UNKNOWN_DOMAIN ||
      step.outcome === Outcome.OVERRIDE
        ? outcomeText[step.outcome]
        : `${step.key}=${step.value} → ${outcomeText[step.outcome]}${step.node !== "" ? ` ${step.node}` : ""}`;
    const item = el("li", { "data-outcome": Outcome[step.outcome] }, text);
    if (step.source !== undefined)
      item.append(
        " ",
        el("span", { class: "source" }, sourceText(step.source)),
      );
    path.append(item);
  }
  section.append(path);
  const rule = d.rule;
  const list = d.limits.length > 0;
  if (rule !== undefined) {
    const limit = list
      ? `rate_limits: ${d.limits.length} limits`
      : ruleLimitText(rule);
    section.append(
      el(
        "div",
        { class: "rule" },
        `rule ${rule.fullKey}: ${limit}` +
          (rule.allOrNothing ? ", charge: all_or_nothing" : ""),
      ),
    );
  }
  if (d.replacedBy !== "")
    section.append(el("div", {}, `replaced by ${d.replacedBy}`));
  let burst = rule?.tokenBucket?.burst;
  if (list) {
    section.append(
      el(
        "ol",
        { class: "limits", start: "0" },
        ...d.limits.map(limitCheckElement),
      ),
    );
    burst = d.limits.find((l) => l.deciding)?.rule?.tokenBucket?.burst;
  } else {
    if (d.counter !== undefined) section.append(...counterElements(d.counter));
    if (d.bucket !== undefined) section.append(bucketElement(d.bucket));
  }
  const status = d.status;
  section.append(decisionElement(d.verdict, status));
  const remaining =
    status === undefined ? undefined : remainingElement(status, burst);
  if (remaining !== undefined) {
    section.append(remaining);
  } else if (d.verdict === Verdict.UNLIMITED && status !== undefined) {
    section.append(
      el(
        "div",
        {
          class: "remaining",
          "data-remaining": String(status.limitRemaining),
        },
        `remaining ${status.limitRemaining} (unlimited), no reset`,
      ),
    );
  }
  for (const note of d.notes)
    section.append(el("div", { class: "muted" }, note));
  return section;
}

function renderExplanation(r: ExplainResponse): void {
  const result = byId("explain-result");
  const over = r.overallCode === Code.OVER_LIMIT;
  result.replaceChildren(
    el(
      "div",
      { class: `overall ${over ? "over" : "ok"}`, id: "explain-overall" },
      `overall: ${Code[r.overallCode]}`,
    ),
    el("div", { class: "muted" }, r.summary),
    ...(r.allOrNothing
      ? [
          el(
            "div",
            { class: "muted", id: "explain-charge-mode" },
            r.allOrNothingRefused
              ? "charge: all_or_nothing: refused, no counter is charged"
              : "charge: all_or_nothing: every counter is charged",
          ),
        ]
      : []),
    ...r.descriptors.map(descriptorElement),
  );
}

/** `k=v,k2=v2; k=v` → descriptors. */
function parseDescriptors(text: string): { key: string; value: string }[][] {
  return text
    .split(";")
    .map((part) => part.trim())
    .filter((part) => part !== "")
    .map((part) =>
      part.split(",").map((pair) => {
        const at = pair.indexOf("=");
        if (at <= 0) throw new Error(`'${pair.trim()}' is not key=value`);
        return {
          key: pair.slice(0, at).trim(),
          value: pair.slice(at + 1).trim(),
        };
      }),
    );
}

/**
 * Reads `/rlconfig`'s JSON form; undefined when this server has none (an older build answers
 * the plain dump whatever the query) or the answer is not the expected shape.
 */
async function fetchConfigReport(): Promise<ConfigReport | undefined> {
  const res = await fetch("/rlconfig?format=json", {
    headers: { accept: "application/json" },
    cache: "no-store",
  });
  const type = res.headers.get("content-type") ?? "";
  if (!res.ok || !type.includes("application/json")) return undefined;
  let body: unknown;
  try {
    body = await res.json();
  } catch {
    return undefined; // Not JSON after all: shown as absent, like an older server.
  }
  if (typeof body !== "object" || body === null) return undefined;
  const r = body as Partial<Record<keyof ConfigReport, unknown>>;
  if (
    !Array.isArray(r.domains) ||
    !r.domains.every((d): d is string => typeof d === "string")
  )
    return undefined;
  return {
    domains: r.domains,
    loadedAt: typeof r.loadedAt === "string" ? r.loadedAt : null,
    lastFailedReload: failedReload(r.lastFailedReload),
  };
}

/** `lastFailedReload` of the JSON form, each field checked; null when absent or malformed. */
function failedReload(value: unknown): ConfigReport["lastFailedReload"] {
  if (typeof value !== "object" || value === null) return null;
  const f = value as Record<string, unknown>;
  const text = (v: unknown): string | null =>
    typeof v === "string" ? v : null;
  const message = text(f["message"]);
  const time = text(f["time"]);
  if (message === null || time === null) return null;
  return {
    file: text(f["file"]),
    line: typeof f["line"] === "number" ? f["line"] : null,
    fieldPath: text(f["fieldPath"]),
    message,
    time,
  };
}

async function refresh(): Promise<void> {
  const [res, report] = await Promise.all([
    fetch("/console/state.json", { cache: "no-store" }),
    // The JSON form is optional: without it the console works as before.
    fetchConfigReport().catch(() => undefined),
  ]);
  if (!res.ok) throw new Error(`state: HTTP ${res.status}`);
  const state = (await res.json()) as State;
  renderState(state);
  operations.update(state.statistics, Date.now());
  // Admin calls that fail (a part not served) show their message in place.
  await operations.refresh();
  // Without the JSON form, the tree's domains are the loaded ones (the plain dump lists only
  // rules with a limit, and cannot tell a dotted domain name from a rule path).
  renderDomains(report?.domains ?? state.domains.map((d) => d.domain));
  renderConfigReport(report);
  const status = byId("refresh-status");
  status.textContent = "";
  status.hidden = true;
}

/** Milliseconds between refreshes: `?refresh=<seconds>` (1 to 3600), else the default. */
function refreshIntervalMs(): number {
  const text = new URLSearchParams(window.location.search).get("refresh");
  const seconds = Number(text);
  return text !== null &&
    Number.isInteger(seconds) &&
    seconds >= 1 &&
    seconds <= 3600
    ? seconds * 1000
    : defaultRefreshMs;
}

const refreshMs = refreshIntervalMs();
// The RLQS buckets and their splits (rlqs-view.ts), after Explain; it polls on its own.
mountRlqsView(byId("explain-section").parentElement ?? document.body, {
  client,
  refreshMs,
  before: document.getElementById("config-section"),
});
// Day-2 operations (operations.ts): rule charts with top offenders, overrides, the canary;
// driven by this poll.
const operations = mountOperations(
  byId("explain-section").parentElement ?? document.body,
  document.getElementById("config-section"),
);
let timer: ReturnType<typeof setTimeout> | undefined;
let running: Promise<void> | undefined;

/**
 * Refreshes now, then every `refreshMs` while the tab is visible. At most one refresh runs
 * at a time; a call during one is dropped (its end schedules the next).
 */
function poll(): void {
  if (timer !== undefined) clearTimeout(timer);
  timer = undefined;
  if (running !== undefined) return;
  running = refresh()
    .catch((err: unknown) => {
      const status = byId("refresh-status");
      status.textContent = `cannot refresh: ${err instanceof Error ? err.message : String(err)}`;
      status.hidden = false;
    })
    .finally(() => {
      running = undefined;
      if (!document.hidden) timer = setTimeout(poll, refreshMs);
    });
}

document.addEventListener("visibilitychange", () => {
  if (document.hidden) {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
  } else {
    poll();
  }
});

byId("explain-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const result = byId("explain-result");
  const domain = (byId("explain-domain") as HTMLInputElement).value.trim();
  const hits = Number((byId("explain-hits") as HTMLInputElement).value || "1");
  const charge = (byId("explain-charge") as HTMLInputElement).checked;
  let descriptors;
  try {
    descriptors = parseDescriptors(
      (byId("explain-descriptors") as HTMLInputElement).value,
    );
  } catch (err) {
    result.replaceChildren(el("div", { class: "error" }, String(err)));
    return;
  }
  client
    .explain({
      request: {
        domain,
        hitsAddend: hits,
        descriptors: descriptors.map((entries) => ({ entries })),
      },
      charge,
    })
    .then((r) => {
      renderExplanation(r);
      // A charged Explain changes the statistics: show them now.
      poll();
    })
    .catch((err: unknown) => {
      result.replaceChildren(
        el(
          "div",
          { class: "error" },
          err instanceof Error ? err.message : String(err),
        ),
      );
    });
});

poll();
