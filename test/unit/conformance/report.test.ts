import { describe, expect, it } from "vitest";
import type { Section } from "../../../src/conformance/model.js";
import {
  buildReport,
  jsonReport,
  textReport,
} from "../../../src/conformance/report.js";

const spec: Section = {
  name: "wildcards",
  scenarios: [
    { id: "a", title: "first", spec: "Matching rules 3" },
    { id: "b", title: "second", spec: "Matching rules 3" },
  ],
};
const beyond: Section = {
  name: "token buckets",
  beyondSpec: true,
  scenarios: [{ id: "probe", title: "probe", spec: "beyond" }],
};

const report = buildReport([
  {
    section: spec,
    results: [
      { status: "passed" },
      {
        status: "failed",
        request: { domain: "d" },
        expected: { overall: "OK" },
        actual: { overallCode: "OVER_LIMIT" },
        message: "overallCode is OVER_LIMIT, expected OK",
      },
    ],
  },
  {
    section: beyond,
    results: [
      { status: "notSupported", reason: "the server refused the config" },
    ],
  },
]);

describe("buildReport and jsonReport", () => {
  it("totals per section and overall", () => {
    expect(report).toMatchObject({ passed: 1, failed: 1, notSupported: 1 });
  });

  it("writes exactly the issue's JSON shape", () => {
    expect(JSON.parse(jsonReport(report))).toEqual({
      passed: 1,
      failed: 1,
      notSupported: 1,
      sections: [
        {
          name: "wildcards",
          passed: 1,
          failed: 1,
          notSupported: 0,
          failures: [
            {
              scenario: "b",
              title: "second",
              spec: "Matching rules 3",
              message: "overallCode is OVER_LIMIT, expected OK",
              request: { domain: "d" },
              expected: { overall: "OK" },
              actual: { overallCode: "OVER_LIMIT" },
            },
          ],
        },
        {
          name: "token buckets",
          passed: 0,
          failed: 0,
          notSupported: 1,
          failures: [],
        },
      ],
    });
  });
});

describe("textReport", () => {
  it("prints a table per kind of section, the reasons and each failure", () => {
    const text = textReport(report);
    expect(text).toContain("From the spec");
    expect(text).toMatch(/wildcards\s+1\s+1\s+0/);
    expect(text).toContain("Beyond the spec (extensions)");
    expect(text).toMatch(/token buckets\s+0\s+0\s+1/);
    expect(text).toContain("- token buckets: the server refused the config");
    expect(text).toContain(
      "FAIL wildcards / b: second (spec: Matching rules 3)",
    );
    expect(text).toContain('request:  {"domain":"d"}');
    expect(text).toContain("total: 1 passed, 1 failed, 1 not supported");
  });
});
