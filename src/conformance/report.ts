// The run's report: totals per section, a text table per section group, each failure with its
// request, expected and actual answer, and the `--json` document in the shape.
import type {
  FailureReport,
  RunReport,
  ScenarioResult,
  Section,
  SectionReport,
} from "./model.js";

/** One section's scenarios and results, in the same order. */
export interface SectionOutcome {
  readonly section: Section;
  readonly results: readonly ScenarioResult[];
}

/** Totals and failures of a run. */
export function buildReport(outcomes: readonly SectionOutcome[]): RunReport {
  const sections: SectionReport[] = outcomes.map(({ section, results }) => {
    const failures: FailureReport[] = [];
    const reasons = new Set<string>();
    const notes: string[] = [];
    let passed = 0;
    let notSupported = 0;
    results.forEach((r, i) => {
      const scenario = section.scenarios[i];
      if (r.status !== "notSupported") notes.push(...(r.notes ?? []));
      if (r.status === "passed") passed++;
      else if (r.status === "notSupported") {
        notSupported++;
        reasons.add(r.reason);
      } else if (scenario !== undefined)
        failures.push({
          scenario: scenario.id,
          title: scenario.title,
          spec: scenario.spec,
          message: r.message,
          request: r.request,
          expected: r.expected,
          actual: r.actual,
        });
    });
    return {
      name: section.name,
      beyondSpec: section.beyondSpec === true,
      passed,
      failed: failures.length,
      notSupported,
      failures,
      notSupportedReasons: [...reasons],
      notes,
    };
  });
  const sum = (f: (s: SectionReport) => number): number =>
    sections.reduce((n, s) => n + f(s), 0);
  return {
    passed: sum((s) => s.passed),
    failed: sum((s) => s.failed),
    notSupported: sum((s) => s.notSupported),
    sections,
  };
}

/**
 * The `--json` document: exactly `{passed, failed, notSupported, sections: [{name, passed,
 * failed, notSupported, failures: [...]}]}`; each failure is `{scenario, title, spec, message,
 * request, expected, actual}`.
 */
export function jsonReport(report: RunReport): string {
  return `${JSON.stringify(
    {
      passed: report.passed,
      failed: report.failed,
      notSupported: report.notSupported,
      sections: report.sections.map((s) => ({
        name: s.name,
        passed: s.passed,
        failed: s.failed,
        notSupported: s.notSupported,
        failures: s.failures,
      })),
    },
    null,
    2,
  )}\n`;
}

function pad(text: string, width: number): string {
  return text + " ".repeat(Math.max(0, width - text.length));
}

/** Rows as an aligned plain-text table, numbers right-aligned. */
function table(
  header: readonly string[],
  rows: readonly (readonly string[])[],
): string {
  const widths = header.map((h, i) =>
    Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)),
  );
  const line = (cells: readonly string[]): string =>
    cells
      .map((c, i) =>
        i === 0 ? pad(c, widths[i] ?? 0) : c.padStart(widths[i] ?? 0),
      )
      .join("  ")
      .trimEnd();
  return [
    line(header),
    line(widths.map((w) => "-".repeat(w))),
    ...rows.map(line),
  ].join("\n");
}

/** The tables of a run as plain text: spec sections, then those beyond the spec. */
export function textReport(report: RunReport): string {
  const parts: string[] = [];
  const header = ["section", "passed", "failed", "not supported"];
  const rowsOf = (beyond: boolean): string[][] =>
    report.sections
      .filter((s) => s.beyondSpec === beyond)
      .map((s) => [
        s.name,
        String(s.passed),
        String(s.failed),
        String(s.notSupported),
      ]);
  parts.push("From the spec\n\n" + table(header, rowsOf(false)));
  const beyond = rowsOf(true);
  if (beyond.length > 0)
    parts.push("Beyond the spec (extensions)\n\n" + table(header, beyond));
  parts.push(
    `total: ${report.passed} passed, ${report.failed} failed, ${report.notSupported} not supported`,
  );
  const notes = report.sections.filter((s) => s.notSupportedReasons.length > 0);
  if (notes.length > 0)
    parts.push(
      "Not supported\n\n" +
        notes
          .map((s) => `- ${s.name}: ${s.notSupportedReasons.join("; ")}`)
          .join("\n"),
    );
  const measured = report.sections.filter((s) => s.notes.length > 0);
  if (measured.length > 0)
    parts.push(
      "Measurements\n\n" +
        measured
          .flatMap((s) => s.notes.map((n) => `- ${s.name}: ${n}`))
          .join("\n"),
    );
  const failures = report.sections.flatMap((s) =>
    s.failures.map((f) => ({ section: s.name, f })),
  );
  if (failures.length > 0)
    parts.push(
      "Failures\n\n" +
        failures
          .map(
            ({ section, f }) =>
              `FAIL ${section} / ${f.scenario}: ${f.title} (spec: ${f.spec})\n` +
              `  ${f.message}\n` +
              `  request:  ${JSON.stringify(f.request)}\n` +
              `  expected: ${JSON.stringify(f.expected)}\n` +
              `  actual:   ${JSON.stringify(f.actual)}`,
          )
          .join("\n\n"),
    );
  return parts.join("\n\n") + "\n";
}
