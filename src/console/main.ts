// The debug console's browser code: config tree, health, counters, and an Explain form that
// calls ratelimit.explain.v1.ExplainService on this same origin with gRPC-web. Bundled by
// scripts/build-console.mjs (esbuild) into dist/console/app.js; nothing is fetched from
// elsewhere at run time.
import { createClient } from "@connectrpc/connect";
import { createGrpcWebTransport } from "@connectrpc/connect-web";
import {
  DescriptorExplanation_Verdict as Verdict,
  ExplainService,
  MatchStep_Outcome as Outcome,
  RateLimitResponse_Code as Code,
  RateLimitResponse_RateLimit_Unit as Unit,
  type DescriptorExplanation,
  type ExplainResponse,
} from "../proto.js";

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
}
interface State {
  healthy: boolean;
  components: Record<string, boolean>;
  uptimeSeconds: number;
  configLoaded: boolean;
  domains: { domain: string; rules: RuleNode[] }[];
  counters: { name: string; value: number }[];
}

const client = createClient(
  ExplainService,
  createGrpcWebTransport({ baseUrl: window.location.origin }),
);

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs))
    node.setAttribute(name, value);
  node.append(...children);
  return node;
}

function byId(id: string): HTMLElement {
  const node = document.getElementById(id);
  if (node === null) throw new Error(`missing #${id}`);
  return node;
}

function sourceText(s: { name: string; line: number; version: string }) {
  if (s.version !== "") return `${s.name}@${s.version}`;
  return s.line > 0 ? `${s.name}:${s.line}` : s.name;
}

function ruleElement(rule: RuleNode): HTMLElement {
  const summary = el(
    "summary",
    {},
    el("span", { class: "rule-key" }, rule.compositeKey),
  );
  const limit = rule.limit;
  if (limit !== undefined) {
    const text = limit.unlimited
      ? "unlimited"
      : `${limit.requestsPerUnit} / ${limit.unit}`;
    summary.append(" ", el("span", { class: "limit" }, text));
    if (limit.name !== "")
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

function renderState(state: State): void {
  const health = byId("health");
  health.textContent = state.healthy ? "healthy" : "unhealthy";
  health.className = `badge ${state.healthy ? "ok" : "fail"}`;
  health.title = Object.entries(state.components)
    .map(([name, ok]) => `${name}: ${ok ? "ok" : "failing"}`)
    .join(", ");
  byId("uptime").textContent = `up ${state.uptimeSeconds}s`;
  const tree = byId("config-tree");
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
  const body = byId("counters").querySelector("tbody");
  body?.replaceChildren(
    ...state.counters.map((c) =>
      el(
        "tr",
        {},
        el("td", {}, c.name),
        el("td", { class: "value" }, String(c.value)),
      ),
    ),
  );
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
  if (rule !== undefined) {
    const limit = rule.unlimited
      ? "unlimited"
      : `${rule.requestsPerUnit} per ${rule.unitMultiplier > 1 ? `${rule.unitMultiplier} ` : ""}${Unit[rule.unit]}` +
        (rule.slidingWindow ? ", sliding window" : "") +
        (rule.allOrNothing ? ", charge: all_or_nothing" : "");
    section.append(
      el("div", { class: "rule" }, `rule ${rule.fullKey}: ${limit}`),
    );
  }
  if (d.replacedBy !== "")
    section.append(el("div", {}, `replaced by ${d.replacedBy}`));
  const c = d.counter;
  if (c !== undefined) {
    section.append(
      el(
        "div",
        { class: "counter" },
        `counter ${c.key}: ${c.value} → ${c.valueAfter}`,
      ),
    );
    if (c.previousKey !== "")
      section.append(
        el(
          "div",
          { class: "counter" },
          `previous window ${c.previousKey}: ${c.previousValue}, weighs ${c.previousWeight}; weighted count with this request ${c.comparedCount}`,
        ),
      );
  }
  const status = d.status;
  section.append(
    el(
      "div",
      { class: "decision" },
      `decision: ${Verdict[d.verdict].toLowerCase().replace(/_/g, " ")}` +
        (status !== undefined ? ` (${Code[status.code]})` : ""),
    ),
  );
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
            { class: "muted", id: "explain-charge" },
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

async function refresh(): Promise<void> {
  const res = await fetch("/console/state.json");
  renderState((await res.json()) as State);
}

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
    .then(renderExplanation)
    .then(refresh)
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

refresh().catch((err: unknown) => {
  byId("config-tree").textContent = `cannot load state: ${String(err)}`;
});
