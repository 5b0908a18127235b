// The console's RLQS view (docs/rlqs.md, "Explaining a bucket"): the buckets this replica's
// RLQS streams are subscribed to, each with its policy, its rate L and the current split of L
// among its streams (demand and share per stream), refreshed every few seconds while the tab
// is visible; and a form that explains one bucket in full (rule, reason, token bucket per
// stream). Both call ratelimit.explain.v1.ExplainService (ListBuckets, ExplainBucket) on this
// same origin with gRPC-web.
import type { Client } from "@connectrpc/connect";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import {
  BucketPolicy,
  BucketPolicyReason,
  RateLimitResponse_RateLimit_Unit as Unit,
  RateLimitStrategy_BlanketRule as BlanketRule,
  type BucketStream,
  type ExplainBucketResponse,
  type ExplainService,
  type RateLimitStrategy,
} from "../proto.js";
import { el } from "./dom.js";

/** Options of {@link mountRlqsView}. */
export interface RlqsViewOptions {
  /** The Explain client of the console (gRPC-web on this origin). */
  readonly client: Client<typeof ExplainService>;
  /** Time between two refreshes of the bucket table, ms. */
  readonly refreshMs: number;
  /** Where the section goes: before this element, else at the end of the root. */
  readonly before?: Element | null;
}

/** The mounted view. */
export interface RlqsView {
  /** Lists the buckets again and redraws the table (errors are shown in the section). */
  refresh(): Promise<void>;
}

/** A rate for people: two decimals at most, `81.82/s`. */
function rateText(perSecond: number): string {
  return `${Math.round(perSecond * 100) / 100}/s`;
}

function entriesText(r: ExplainBucketResponse): string {
  return r.entries.map((e) => `${e.key}=${e.value}`).join(",");
}

function reasonText(reason: BucketPolicyReason): string {
  return BucketPolicyReason[reason].toLowerCase().replace(/_/g, " ");
}

/** `81 per 1s, max 9`, or the blanket rule. */
function strategyText(strategy: RateLimitStrategy | undefined): string {
  const s = strategy?.strategy;
  if (s?.case === "tokenBucket")
    return `${s.value.tokensPerFill ?? 0} per ${s.value.fillInterval?.seconds ?? 0n}s, max ${s.value.maxTokens}`;
  if (s?.case === "blanketRule") return BlanketRule[s.value];
  return "—";
}

function timeText(t: Timestamp | undefined): string {
  return t === undefined
    ? "—"
    : new Date(Number(t.seconds) * 1000 + t.nanos / 1e6).toISOString();
}

function demandText(s: BucketStream): string {
  return s.demandPerSecond === undefined
    ? "unmeasured"
    : rateText(s.demandPerSecond);
}

/** `k=v,k2=v2` → a bucket map. @throws Error naming the bad pair */
export function parseBucket(text: string): Record<string, string> {
  const bucket: Record<string, string> = {};
  for (const pair of text.split(",")) {
    if (pair.trim() === "") continue;
    const at = pair.indexOf("=");
    if (at <= 0) throw new Error(`'${pair.trim()}' is not key=value`);
    bucket[pair.slice(0, at).trim()] = pair.slice(at + 1).trim();
  }
  if (Object.keys(bucket).length === 0)
    throw new Error("a bucket needs at least one key=value entry");
  return bucket;
}

/** One row of the bucket table: the bucket, its policy and L, and each stream's part. */
function bucketRow(
  r: ExplainBucketResponse,
  onPick: (domain: string, bucket: string) => void,
): HTMLElement {
  const bucket = entriesText(r);
  const streams = el(
    "ul",
    { class: "rlqs-streams" },
    ...r.streams.map((s) =>
      el(
        "li",
        {
          "data-stream-id": s.streamId,
          "data-demand":
            s.demandPerSecond === undefined ? "" : String(s.demandPerSecond),
          "data-share": String(s.sharePerSecond),
          "data-assigned": String(s.assignedPerSecond),
          title: `token bucket ${strategyText(s.shadowAssignment ?? s.assignment)}`,
        },
        `${s.streamId}${s.local || s.replica === "" ? "" : ` @${s.replica}`}: ${demandText(s)} → ${rateText(s.sharePerSecond)}`,
      ),
    ),
  );
  const row = el(
    "tr",
    {
      "data-domain": r.domain,
      "data-bucket": bucket,
      "data-policy": BucketPolicy[r.policy],
      "data-limit": String(r.limitPerSecond),
      "data-share-sum": String(r.shareSumPerSecond),
      title: r.summary,
    },
    el("td", {}, r.domain),
    el("td", { class: "rlqs-bucket" }, bucket),
    el("td", {}, `${BucketPolicy[r.policy]} (${reasonText(r.reason)})`),
    el(
      "td",
      { class: "value" },
      r.limitPerSecond > 0 ? rateText(r.limitPerSecond) : "—",
    ),
    el("td", { class: "value" }, String(r.streams.length)),
    el("td", {}, streams),
    el("td", { class: "value" }, rateText(r.shareSumPerSecond)),
  );
  row.addEventListener("click", () => {
    onPick(r.domain, bucket);
  });
  return row;
}

/** The full explanation of one bucket: summary, rule, and a table of the split. */
function explanationElements(r: ExplainBucketResponse): HTMLElement[] {
  const out: HTMLElement[] = [
    el(
      "div",
      {
        id: "rlqs-explain-summary",
        class: "overall",
        "data-policy": BucketPolicy[r.policy],
        "data-reason": BucketPolicyReason[r.reason],
      },
      r.summary,
    ),
  ];
  const rule = r.rule;
  const source = rule?.source;
  out.push(
    el(
      "div",
      { class: "rlqs-rule" },
      rule === undefined
        ? `no rule; entries in order: ${entriesText(r)}`
        : `rule ${rule.fullKey}: ${rule.requestsPerUnit} per ${rule.unitMultiplier > 1 ? `${rule.unitMultiplier} ` : ""}${Unit[rule.unit]}${rule.shadowMode ? ", shadow_mode" : ""}${source !== undefined && source.name !== "" ? ` (${source.name}${source.line > 0 ? `:${source.line}` : ""})` : ""}; entries in tree order: ${entriesText(r)}`,
    ),
    el(
      "div",
      { class: "muted" },
      `L ${rateText(r.limitPerSecond)}; shares sum to ${rateText(r.shareSumPerSecond)}, the token buckets admit ${rateText(r.assignedSumPerSecond)}; ledger ${r.ledger}${r.replica !== "" ? `, answered by replica ${r.replica}` : ""}`,
    ),
  );
  if (r.ledgerError !== "")
    out.push(
      el(
        "div",
        { class: "error" },
        `the kv store could not be read (${r.ledgerError}): the split shown is this replica's fallback`,
      ),
    );
  if (r.streams.length === 0) {
    out.push(el("div", { class: "muted" }, "no stream holds this bucket"));
    return out;
  }
  const shadow = r.reason === BucketPolicyReason.SHADOW_MODE;
  out.push(
    el(
      "table",
      { class: "rlqs-split" },
      el(
        "thead",
        {},
        el(
          "tr",
          {},
          ...[
            "stream",
            "replica",
            "demand",
            "share",
            shadow ? "told (enforced in shadow mode)" : "token bucket",
            "last report",
          ].map((h) => el("th", {}, h)),
        ),
      ),
      el(
        "tbody",
        {},
        ...r.streams.map((s) =>
          el(
            "tr",
            {
              "data-stream-id": s.streamId,
              "data-share": String(s.sharePerSecond),
              "data-assigned": String(s.assignedPerSecond),
            },
            el("td", {}, s.streamId),
            el(
              "td",
              {},
              s.replica === "" ? "this process" : s.replica,
              s.local ? " (here)" : "",
            ),
            el("td", { class: "value" }, demandText(s)),
            el("td", { class: "value" }, rateText(s.sharePerSecond)),
            el(
              "td",
              {},
              s.shadowAssignment !== undefined
                ? `${strategyText(s.assignment)} (${strategyText(s.shadowAssignment)})`
                : strategyText(s.assignment),
            ),
            el("td", {}, timeText(s.lastReportTime)),
          ),
        ),
      ),
    ),
  );
  return out;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Builds the RLQS section (bucket table and explain form) in `root` and refreshes the table
 * every `refreshMs` while the tab is visible.
 */
export function mountRlqsView(
  root: HTMLElement,
  options: RlqsViewOptions,
): RlqsView {
  const { client, refreshMs } = options;
  const status = el("div", {
    id: "rlqs-status",
    class: "error",
    role: "status",
  });
  status.hidden = true;
  const body = el("tbody");
  const table = el(
    "table",
    { id: "rlqs-buckets" },
    el(
      "thead",
      {},
      el(
        "tr",
        {},
        ...[
          "domain",
          "bucket",
          "policy",
          "L",
          "streams",
          "demand → share per stream",
          "Σ shares",
        ].map((h) => el("th", {}, h)),
      ),
    ),
    body,
  );
  const domainInput = el("input", {
    id: "rlqs-domain",
    list: "domain-list",
    autocomplete: "off",
    required: "",
  });
  const bucketInput = el("input", {
    id: "rlqs-bucket",
    placeholder: "key=value,key2=value2",
    required: "",
  });
  const form = el(
    "form",
    { id: "rlqs-explain-form" },
    el("label", {}, "Domain ", domainInput),
    el("label", {}, "Bucket ", bucketInput),
    el("button", { type: "submit" }, "Explain bucket"),
  );
  const result = el("div", {
    id: "rlqs-explain-result",
    "aria-live": "polite",
  });
  const section = el(
    "section",
    { id: "rlqs-section" },
    el("h2", {}, "RLQS"),
    el(
      "p",
      { class: "muted" },
      "Buckets the RLQS streams of this replica are subscribed to, and the current split of each bucket's limit L among its streams (smoothed demand → share, requests per second). Click a row to explain its bucket.",
    ),
    status,
    table,
    form,
    result,
  );
  const before = options.before;
  if (before?.parentNode === root) root.insertBefore(section, before);
  else root.append(section);

  async function explain(domain: string, text: string): Promise<void> {
    let bucket;
    try {
      bucket = parseBucket(text);
    } catch (err) {
      result.replaceChildren(el("div", { class: "error" }, errorText(err)));
      return;
    }
    try {
      const r = await client.explainBucket({ domain, bucket });
      result.replaceChildren(...explanationElements(r));
    } catch (err) {
      result.replaceChildren(el("div", { class: "error" }, errorText(err)));
    }
  }

  function pick(domain: string, bucket: string): void {
    domainInput.value = domain;
    bucketInput.value = bucket;
    void explain(domain, bucket);
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    void explain(domainInput.value.trim(), bucketInput.value);
  });

  async function refresh(): Promise<void> {
    try {
      const list = await client.listBuckets({});
      body.replaceChildren(
        ...list.buckets.map((b) => bucketRow(b, pick)),
        ...(list.buckets.length === 0
          ? [
              el(
                "tr",
                { class: "muted" },
                el("td", { colspan: "7" }, "no bucket is subscribed"),
              ),
            ]
          : []),
        ...(list.truncated
          ? [
              el(
                "tr",
                { class: "muted" },
                el("td", { colspan: "7" }, "more buckets not shown"),
              ),
            ]
          : []),
      );
      status.hidden = true;
      status.textContent = "";
    } catch (err) {
      status.textContent = `cannot list RLQS buckets: ${errorText(err)}`;
      status.hidden = false;
    }
  }

  let timer: ReturnType<typeof setTimeout> | undefined;
  let running = false;
  /** Refreshes now, then every `refreshMs` while the tab is visible; one at a time. */
  function poll(): void {
    if (timer !== undefined) clearTimeout(timer);
    timer = undefined;
    if (running) return;
    running = true;
    void refresh().finally(() => {
      running = false;
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
  poll();
  return { refresh };
}
