// The console's day-2 view (docs/operations.md): per rule, a live chart of decisions per
// second (within limit, near limit, over limit, shadow mode) drawn from the statistics the
// console already polls, with the rule's top offenders beside it; the run-time overrides with
// their expiry and a form to add one; and the config canary's diff. Admin data comes from
// ratelimit.admin.v1.AdminService on this same origin (gRPC-web). Plain SVG drawn here;
// nothing is fetched from elsewhere.
import { createClient, type Client } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import type { Duration, Timestamp } from "@bufbuild/protobuf/wkt";
import { el } from "./dom.js";
import {
  AdminService,
  RateLimitResponse_RateLimit_Unit as Unit,
  type GetCanaryReportResponse,
  type Override,
  type RuleOffenders,
} from "../proto.js";

/** One statistic as `/console/state.json` lists it. */
export interface Statistic {
  readonly name: string;
  readonly value: number;
}

/** The series of a rule's chart, in drawing order. */
const series = [
  { stat: "within_limit", label: "within limit", className: "s-within" },
  { stat: "near_limit", label: "near limit", className: "s-near" },
  { stat: "over_limit", label: "over limit", className: "s-over" },
  { stat: "shadow_mode", label: "shadow mode", className: "s-shadow" },
] as const;
type SeriesStat = (typeof series)[number]["stat"];

const ruleStatPrefix = "ratelimit.service.rate_limit.";
/** How much history a chart shows, in milliseconds. */
export const chartSpanMs = 5 * 60 * 1000;
const chartWidth = 320;
const chartHeight = 90;

interface Sample {
  /** Milliseconds since the Unix epoch (browser clock). */
  readonly atMs: number;
  /** Decisions (hits) per second since the previous sample, per series. */
  readonly rates: Readonly<Record<SeriesStat, number>>;
}

interface RuleHistory {
  /** The rule's first poll, ms (the first sample's interval starts here). */
  readonly startMs: number;
  last: Record<SeriesStat, number> | undefined;
  lastAtMs: number;
  readonly samples: Sample[];
}

/**
 * Groups the per-rule counters (`ratelimit.service.rate_limit.<rule>.<stat>`) by rule, where
 * `<rule>` is the rule's stats key (`domain.key_value…`).
 */
export function ruleCounters(
  statistics: readonly Statistic[],
): Map<string, Record<SeriesStat, number>> {
  const rules = new Map<string, Record<SeriesStat, number>>();
  for (const { name, value } of statistics) {
    if (!name.startsWith(ruleStatPrefix)) continue;
    const dot = name.lastIndexOf(".");
    const stat = name.slice(dot + 1);
    if (!series.some((s) => s.stat === stat)) continue;
    const rule = name.slice(ruleStatPrefix.length, dot);
    if (rule === "") continue;
    let counters = rules.get(rule);
    if (counters === undefined) {
      counters = {
        within_limit: 0,
        near_limit: 0,
        over_limit: 0,
        shadow_mode: 0,
      };
      rules.set(rule, counters);
    }
    counters[stat as SeriesStat] = value;
  }
  return rules;
}

const svgNs = "http://www.w3.org/2000/svg";

function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string>,
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(svgNs, tag);
  for (const [name, value] of Object.entries(attrs))
    node.setAttribute(name, value);
  return node;
}

/** Rounds a rate for display: whole numbers from 10 up, one decimal below. */
function rateText(perSecond: number): string {
  return perSecond >= 10 ? perSecond.toFixed(0) : perSecond.toFixed(1);
}

/** Shortest time a chart spans, in milliseconds (a new rule's chart widens up to 5 minutes). */
const minChartSpanMs = 30 * 1000;

/**
 * Draws one rule's chart: a step line per series (each sample's rate held over the interval it
 * measured) over the time since the console started watching the rule, at least 30 s and at
 * most {@link chartSpanMs}; the y axis from 0 to the highest rate shown.
 *
 * @param startMs - when the first sample's interval began (the rule's first poll), ms
 */
export function chartElement(
  samples: readonly Sample[],
  startMs: number,
  nowMs: number,
): SVGSVGElement {
  const chart = svg("svg", {
    class: "rule-chart",
    width: String(chartWidth),
    height: String(chartHeight),
    viewBox: `0 0 ${chartWidth} ${chartHeight}`,
    role: "img",
  });
  const shown = samples.filter((s) => s.atMs >= nowMs - chartSpanMs);
  let top = 0;
  for (const s of shown)
    for (const { stat } of series) top = Math.max(top, s.rates[stat]);
  const title = svg("title", {});
  const latest = shown.at(-1);
  title.textContent =
    latest === undefined
      ? "no samples yet"
      : series
          .map(
            ({ stat, label }) => `${label} ${rateText(latest.rates[stat])}/s`,
          )
          .join(", ");
  chart.append(title);
  chart.append(
    svg("line", {
      class: "axis",
      x1: "0",
      y1: String(chartHeight - 0.5),
      x2: String(chartWidth),
      y2: String(chartHeight - 0.5),
    }),
  );
  const spanMs = Math.min(
    chartSpanMs,
    Math.max(minChartSpanMs, nowMs - startMs),
  );
  const x = (atMs: number): number =>
    Math.max(0, ((atMs - (nowMs - spanMs)) / spanMs) * chartWidth);
  const y = (rate: number): number =>
    top === 0
      ? chartHeight - 1
      : chartHeight - 1 - (rate / top) * (chartHeight - 12);
  for (const { stat, className } of series) {
    if (!shown.some((s) => s.rates[stat] > 0)) continue;
    const points: string[] = [];
    let from = startMs;
    for (const s of shown) {
      const height = y(s.rates[stat]).toFixed(1);
      points.push(
        `${x(from).toFixed(1)},${height}`,
        `${x(s.atMs).toFixed(1)},${height}`,
      );
      from = s.atMs;
    }
    chart.append(
      svg("polyline", {
        class: `series ${className}`,
        points: points.join(" "),
        "data-series": stat,
      }),
    );
  }
  const scale = svg("text", { x: "2", y: "10", class: "scale" });
  scale.textContent = `${rateText(top)}/s`;
  const span = svg("text", {
    x: String(chartWidth - 2),
    y: "10",
    class: "scale",
    "text-anchor": "end",
  });
  span.textContent = `last ${Math.round(spanMs / 1000)} s`;
  chart.append(scale, span);
  return chart;
}

function legendElement(): HTMLElement {
  return el(
    "div",
    { class: "chart-legend" },
    ...series.map(({ label, className }) =>
      el("span", { class: `legend ${className}` }, label),
    ),
  );
}

function timestampMs(t: Timestamp | undefined): number | undefined {
  if (t === undefined) return undefined;
  return Number(t.seconds) * 1000 + Math.floor(t.nanos / 1e6);
}

function timeText(t: Timestamp | undefined): string {
  const ms = timestampMs(t);
  return ms === undefined ? "never" : new Date(ms).toISOString();
}

function entriesText(
  entries: readonly { key: string; value: string }[],
): string {
  return entries.map((e) => `${e.key}=${e.value}`).join(",");
}

/** The limit of an override, e.g. "10/MINUTE", "unlimited", "token bucket 5/SECOND burst 10". */
export function overrideLimitText(o: Override): string {
  const limit = o.limit;
  if (limit === undefined) return "";
  if (limit.unlimited) return "unlimited";
  const unit = Unit[limit.unit];
  const per =
    limit.unitMultiplier > 1
      ? `${limit.requestsPerUnit}/${limit.unitMultiplier} ${unit}`
      : `${limit.requestsPerUnit}/${unit}`;
  const algorithm =
    limit.algorithm === "" || limit.algorithm === "fixed_window"
      ? ""
      : ` ${limit.algorithm.replace("_", " ")}`;
  const burst = limit.burst > 0 ? ` burst ${limit.burst}` : "";
  const shadow = limit.shadowMode ? " (shadow mode)" : "";
  return `${per}${algorithm}${burst}${shadow}`;
}

/** Parses `k=v,k2=v2` into entries; throws on a pair without `=` or an empty key. */
export function parseEntries(text: string): { key: string; value: string }[] {
  const entries: { key: string; value: string }[] = [];
  for (const pair of text.split(",")) {
    const trimmed = pair.trim();
    if (trimmed === "") continue;
    const eq = trimmed.indexOf("=");
    if (eq <= 0) throw new Error(`expected key=value, got "${trimmed}"`);
    entries.push({
      key: trimmed.slice(0, eq).trim(),
      value: trimmed.slice(eq + 1).trim(),
    });
  }
  if (entries.length === 0) throw new Error("no entries: expected key=value");
  return entries;
}

function secondsDuration(seconds: number): Duration | undefined {
  if (!Number.isFinite(seconds) || seconds <= 0) return undefined;
  return {
    $typeName: "google.protobuf.Duration",
    seconds: BigInt(Math.floor(seconds)),
    nanos: 0,
  };
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** The day-2 view, mounted once; `update` and `refresh` are called on every console poll. */
export interface OperationsView {
  /** Takes a new statistics snapshot and redraws the charts. */
  update(statistics: readonly Statistic[], nowMs: number): void;
  /** Fetches overrides, top offenders and the canary report, and redraws them. */
  refresh(): Promise<void>;
}

/** Overrides the table shows (the first by domain and descriptor). */
const listLimit = 100;
/** With more than 10 × {@link listLimit} overrides, they are listed every this many polls. */
const largeListEvery = 20;

const unitChoices = [
  "SECOND",
  "MINUTE",
  "HOUR",
  "DAY",
  "WEEK",
  "MONTH",
  "YEAR",
];

/**
 * Builds the day-2 sections (rule charts with top offenders, overrides, canary) in `root`,
 * before `before` (at the end when null) and returns the view the console's poll drives.
 */
export function mountOperations(
  root: HTMLElement,
  before: Element | null = null,
): OperationsView {
  const admin: Client<typeof AdminService> = createClient(
    AdminService,
    createGrpcWebTransport({ baseUrl: window.location.origin }),
  );
  const histories = new Map<string, RuleHistory>();
  /** Overrides in force at the last listing; polls since the view was mounted. */
  let overridesTotal = 0;
  let polls = 0;
  let offenders = new Map<string, RuleOffenders>();
  let lastNowMs = Date.now();

  const rulesBody = el("div", { id: "rule-charts" });
  const rulesNote = el("p", { class: "muted", id: "rule-charts-note" });
  rulesNote.textContent =
    "Decisions per second of each rule with traffic over the last 5 minutes, and its top offenders (heaviest descriptor values over the current and previous window).";
  const rulesSection = el(
    "section",
    { id: "rules-section" },
    el("h2", {}, "Rules"),
    rulesNote,
    legendElement(),
    rulesBody,
  );

  const overridesBody = el("div", { id: "overrides" });
  const overrideStatus = el("div", { id: "override-status", role: "status" });
  const form = el(
    "form",
    { id: "override-form", class: "inline-form" },
    el("input", { id: "override-domain", placeholder: "domain", required: "" }),
    el("input", {
      id: "override-entries",
      placeholder: "key=value,key2=value2",
      required: "",
      size: "28",
    }),
    el("input", {
      id: "override-requests",
      type: "number",
      min: "0",
      placeholder: "requests",
      size: "8",
    }),
    el(
      "select",
      { id: "override-unit" },
      ...unitChoices.map((u) => el("option", { value: u }, u)),
    ),
    el(
      "label",
      {},
      el("input", { id: "override-unlimited", type: "checkbox" }),
      " unlimited",
    ),
    el("input", {
      id: "override-ttl",
      type: "number",
      min: "0",
      placeholder: "ttl seconds",
      size: "8",
    }),
    el("input", { id: "override-reason", placeholder: "reason", size: "20" }),
    el("button", { type: "submit" }, "Set override"),
  );
  const overridesSection = el(
    "section",
    { id: "overrides-section" },
    el("h2", {}, "Overrides"),
    el(
      "p",
      { class: "muted" },
      "Run-time limits for one descriptor, in place of the matched rule's limit until they expire or are deleted.",
    ),
    form,
    overrideStatus,
    overridesBody,
  );

  const canaryBody = el("div", { id: "canary" });
  const canaryStatus = el("div", { id: "canary-status", role: "status" });
  const canaryForm = el(
    "form",
    { id: "canary-form", class: "inline-form" },
    el("input", {
      id: "canary-dir",
      placeholder: "candidate config directory",
      size: "32",
    }),
    el("button", { type: "submit" }, "Start canary"),
    el("button", { type: "button", id: "canary-stop" }, "Stop"),
  );
  const canarySection = el(
    "section",
    { id: "canary-section" },
    el("h2", {}, "Config canary"),
    el(
      "p",
      { class: "muted" },
      "A candidate config evaluated beside the live one: the requests it would answer differently, per rule.",
    ),
    canaryForm,
    canaryStatus,
    canaryBody,
  );
  for (const section of [rulesSection, overridesSection, canarySection])
    root.insertBefore(section, before);

  function renderRules(): void {
    const rules = [...histories.keys()].sort();
    const cards: HTMLElement[] = [];
    for (const rule of rules) {
      const history = histories.get(rule);
      if (history === undefined) continue;
      const active = history.samples.some(
        (s) =>
          s.atMs >= lastNowMs - chartSpanMs &&
          series.some(({ stat }) => s.rates[stat] > 0),
      );
      const top = offenders.get(rule);
      if (!active && (top === undefined || top.offenders.length === 0))
        continue;
      const table = el(
        "table",
        { class: "offenders" },
        el(
          "thead",
          {},
          el(
            "tr",
            {},
            el("th", {}, "descriptor"),
            el("th", {}, "hits"),
            el("th", {}, "over limit"),
          ),
        ),
        el(
          "tbody",
          {},
          ...(top?.offenders ?? []).map((o) =>
            el(
              "tr",
              { "data-descriptor": o.descriptor },
              el("td", {}, o.descriptor),
              el(
                "td",
                {
                  class: "value",
                  title: `estimate: at most ${o.error} above the true count`,
                },
                String(o.hits),
              ),
              el("td", { class: "value" }, String(o.overLimit)),
            ),
          ),
        ),
      );
      cards.push(
        el(
          "div",
          { class: "rule-card", "data-rule": rule },
          el("h3", {}, rule),
          el(
            "div",
            { class: "rule-card-body" },
            chartElement(
              history.samples,
              Math.max(history.startMs, lastNowMs - chartSpanMs),
              lastNowMs,
            ),
            top === undefined || top.offenders.length === 0
              ? el("p", { class: "muted" }, "no offenders tracked")
              : table,
          ),
        ),
      );
    }
    if (cards.length === 0)
      rulesBody.replaceChildren(
        el("p", { class: "muted" }, "no rule has had traffic yet"),
      );
    else rulesBody.replaceChildren(...cards);
  }

  function renderOverrides(list: readonly Override[], total: number): void {
    if (list.length === 0) {
      overridesBody.replaceChildren(
        el("p", { class: "muted" }, "no override in force"),
      );
      return;
    }
    overridesBody.replaceChildren(
      el(
        "p",
        { class: "muted", id: "overrides-count" },
        total > list.length
          ? `the first ${list.length} of ${total} overrides (by domain and descriptor); refreshed every ${largeListEvery} polls`
          : `${total} override${total === 1 ? "" : "s"}`,
      ),
      el(
        "table",
        { class: "overrides" },
        el(
          "thead",
          {},
          el(
            "tr",
            {},
            ...[
              "domain",
              "descriptor",
              "limit",
              "rule",
              "expires",
              "reason",
              "by",
              "",
            ].map((h) => el("th", {}, h)),
          ),
        ),
        el(
          "tbody",
          {},
          ...list.map((o) => {
            const remove = el("button", { type: "button" }, "Delete");
            remove.addEventListener("click", () => {
              admin
                .deleteOverride({
                  domain: o.domain,
                  entries: o.entries,
                  reason: "deleted from the console",
                })
                .then(() => refreshOverrides())
                .catch((err: unknown) => {
                  overrideStatus.textContent = errorText(err);
                  overrideStatus.className = "error";
                });
            });
            return el(
              "tr",
              { "data-descriptor": entriesText(o.entries) },
              el("td", {}, o.domain),
              el("td", {}, entriesText(o.entries)),
              el("td", {}, overrideLimitText(o)),
              el("td", {}, o.rule),
              el("td", {}, timeText(o.expireTime)),
              el("td", {}, o.reason),
              el("td", {}, o.actor),
              el("td", {}, remove),
            );
          }),
        ),
      ),
    );
  }

  function renderCanary(report: GetCanaryReportResponse): void {
    if (!report.active && report.rules.length === 0) {
      canaryBody.replaceChildren(
        el("p", { class: "muted" }, "no canary running"),
      );
      return;
    }
    const summary = el(
      "p",
      { id: "canary-summary" },
      `${report.active ? "running" : "stopped"} since ${timeText(report.startTime)} (${report.source}): ${report.requests} requests evaluated, ${report.changedRequests} would be answered differently`,
    );
    const rows = report.rules.map((r) =>
      el(
        "tr",
        { "data-rule": r.rule },
        el("td", {}, r.rule),
        el("td", { class: "value" }, String(r.wouldRefuse)),
        el("td", { class: "value" }, String(r.wouldAdmit)),
        el(
          "td",
          {},
          r.top
            .slice(0, 5)
            .map((o) => `${o.descriptor} (${o.hits})`)
            .join(", "),
        ),
      ),
    );
    canaryBody.replaceChildren(
      summary,
      el(
        "table",
        { class: "canary" },
        el(
          "thead",
          {},
          el(
            "tr",
            {},
            el("th", {}, "rule"),
            el("th", {}, "OK → OVER_LIMIT"),
            el("th", {}, "OVER_LIMIT → OK"),
            el("th", {}, "top values"),
          ),
        ),
        el("tbody", {}, ...rows),
      ),
    );
  }

  async function refreshOverrides(): Promise<void> {
    const list = await admin.listOverrides({ domain: "", limit: listLimit });
    overridesTotal = list.total;
    renderOverrides(list.overrides, list.total);
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const value = (id: string): string =>
      (document.getElementById(id) as HTMLInputElement).value.trim();
    let entries;
    try {
      entries = parseEntries(value("override-entries"));
    } catch (err) {
      overrideStatus.textContent = errorText(err);
      overrideStatus.className = "error";
      return;
    }
    const unlimited = (
      document.getElementById("override-unlimited") as HTMLInputElement
    ).checked;
    const ttl = secondsDuration(Number(value("override-ttl")));
    admin
      .setOverride({
        domain: value("override-domain"),
        entries,
        limit: {
          requestsPerUnit: Number(value("override-requests") || "0"),
          unit: Unit[value("override-unit") as keyof typeof Unit],
          unlimited,
        },
        ...(ttl !== undefined ? { ttl } : {}),
        reason: value("override-reason"),
      })
      .then((r) => {
        overrideStatus.textContent = `set: ${entriesText(r.override?.entries ?? [])} → ${r.override === undefined ? "" : overrideLimitText(r.override)}`;
        overrideStatus.className = "ok";
        return refreshOverrides();
      })
      .catch((err: unknown) => {
        overrideStatus.textContent = errorText(err);
        overrideStatus.className = "error";
      });
  });

  canaryForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const dir = (
      document.getElementById("canary-dir") as HTMLInputElement
    ).value.trim();
    admin
      .startCanary({ configDir: dir })
      .then((r) => {
        canaryStatus.textContent = `canary started with domains ${r.domains.join(", ")}`;
        canaryStatus.className = "ok";
        return admin.getCanaryReport({}).then(renderCanary);
      })
      .catch((err: unknown) => {
        canaryStatus.textContent = errorText(err);
        canaryStatus.className = "error";
      });
  });
  document.getElementById("canary-stop")?.addEventListener("click", () => {
    admin
      .stopCanary({})
      .then((r) => {
        canaryStatus.textContent = "canary stopped";
        canaryStatus.className = "ok";
        if (r.report !== undefined) renderCanary(r.report);
      })
      .catch((err: unknown) => {
        canaryStatus.textContent = errorText(err);
        canaryStatus.className = "error";
      });
  });

  return {
    update(statistics, nowMs) {
      lastNowMs = nowMs;
      for (const [rule, counters] of ruleCounters(statistics)) {
        let history = histories.get(rule);
        if (history === undefined) {
          history = {
            startMs: nowMs,
            last: undefined,
            lastAtMs: nowMs,
            samples: [],
          };
          histories.set(rule, history);
        }
        const last = history.last;
        const seconds = (nowMs - history.lastAtMs) / 1000;
        if (last !== undefined && seconds > 0) {
          const rates = {
            within_limit: 0,
            near_limit: 0,
            over_limit: 0,
            shadow_mode: 0,
          };
          for (const { stat } of series) {
            // A counter that went down was reset (a config reload): count from zero.
            const delta =
              counters[stat] >= last[stat]
                ? counters[stat] - last[stat]
                : counters[stat];
            rates[stat] = delta / seconds;
          }
          history.samples.push({ atMs: nowMs, rates });
          const from = nowMs - chartSpanMs;
          const keep = history.samples.findIndex((s) => s.atMs >= from);
          if (keep > 0) history.samples.splice(0, keep);
        }
        history.last = { ...counters };
        history.lastAtMs = nowMs;
      }
      renderRules();
    },

    async refresh() {
      // Listing sorts every override in force: with many, ask less often.
      polls += 1;
      const listNow =
        overridesTotal <= listLimit * 10 || polls % largeListEvery === 0;
      const [top, list, canary] = await Promise.allSettled([
        admin.topOffenders({ domain: "", k: 10 }),
        listNow
          ? admin.listOverrides({ domain: "", limit: listLimit })
          : Promise.resolve(undefined),
        admin.getCanaryReport({}),
      ]);
      if (top.status === "fulfilled") {
        offenders = new Map(top.value.rules.map((r) => [r.rule, r]));
        rulesNote.classList.remove("error");
      } else {
        offenders = new Map();
      }
      renderRules();
      if (list.status === "fulfilled") {
        if (list.value !== undefined) {
          overridesTotal = list.value.total;
          renderOverrides(list.value.overrides, list.value.total);
        }
      } else
        overridesBody.replaceChildren(
          el("p", { class: "muted" }, errorText(list.reason)),
        );
      if (canary.status === "fulfilled") renderCanary(canary.value);
      else
        canaryBody.replaceChildren(
          el("p", { class: "muted" }, errorText(canary.reason)),
        );
    },
  };
}
