// Readable text of the config canary's answers for `ratelimit-config-check -canary`
// (docs/operations.md#config-canary shows real output).

import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { CanaryRuleReport, GetCanaryReportResponse } from "../proto.js";

/**
 * Formats a canary report: a header (state, start, source), the totals, one table row per rule
 * with changes (would refuse, would admit), then each rule's top descriptor values, heaviest
 * first (`±n` where the Space-Saving estimate may be n too high).
 *
 * @param address - the debug address the report came from, named in the header
 * @returns the lines, without newlines
 */
export function formatCanaryReport(
  report: GetCanaryReportResponse,
  address: string,
): string[] {
  if (!report.active && report.startTime === undefined)
    return [`config canary on ${address}: none has run`];
  const lines = [
    `config canary on ${address}: ${report.active ? "running" : "stopped"}, started ${time(report.startTime)}, candidate ${report.source === "" ? "(unknown)" : report.source}`,
  ];
  let refuse = 0n;
  let admit = 0n;
  for (const rule of report.rules) {
    refuse += rule.wouldRefuse;
    admit += rule.wouldAdmit;
  }
  lines.push(
    `requests ${report.requests}, answered differently ${report.changedRequests} (would refuse ${refuse}, would admit ${admit})` +
      (report.unevaluatedRequests > 0n
        ? `, not evaluated ${report.unevaluatedRequests}`
        : ""),
  );
  if (report.rules.length === 0) {
    lines.push("no request would have been answered differently");
    return lines;
  }
  lines.push("");
  lines.push(
    ...table(
      ["rule", "domain", "would refuse", "would admit"],
      report.rules.map((r) => [
        r.rule,
        r.domain,
        String(r.wouldRefuse),
        String(r.wouldAdmit),
      ]),
      [false, false, true, true],
    ),
  );
  for (const rule of report.rules) lines.push(...topValues(rule));
  return lines;
}

function topValues(rule: CanaryRuleReport): string[] {
  if (rule.top.length === 0) return [];
  return [
    "",
    `${rule.rule}: top values`,
    ...table(
      ["descriptor", "changed", "would refuse"],
      rule.top.map((o) => [
        o.descriptor === "" ? "(none)" : o.descriptor,
        o.error > 0n ? `${o.hits} ±${o.error}` : String(o.hits),
        String(o.overLimit),
      ]),
      [false, true, true],
    ).map((line) => `  ${line}`),
  ];
}

/** Left- or right-aligned columns separated by two spaces; the header first. */
function table(
  header: readonly string[],
  rows: readonly (readonly string[])[],
  right: readonly boolean[],
): string[] {
  const widths = header.map((h, i) =>
    Math.max(h.length, ...rows.map((row) => (row[i] ?? "").length)),
  );
  const line = (cells: readonly string[]): string =>
    cells
      .map((cell, i) =>
        right[i] === true
          ? cell.padStart(widths[i] ?? 0)
          : cell.padEnd(widths[i] ?? 0),
      )
      .join("  ")
      .trimEnd();
  return [line(header), ...rows.map(line)];
}

function time(timestamp: Timestamp | undefined): string {
  return timestamp === undefined
    ? "(unknown)"
    : timestampDate(timestamp).toISOString();
}
