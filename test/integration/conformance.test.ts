import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { repoRoot, runToEnd } from "../helpers/spawn-service.js";

// The conformance suite (bin/ratelimit-conformance, issue 35) against this service in launch
// mode, on the memory backend and on kv (a redis-server the suite starts): every scenario of
// the spec and of the extensions this service has must pass. A change anywhere underneath
// that alters a decision fails here, whatever the unit tests of that code say. The two runs go
// side by side: most of their time is waiting for reloads.

interface JsonReport {
  readonly passed: number;
  readonly failed: number;
  readonly notSupported: number;
  readonly sections: readonly {
    readonly name: string;
    readonly passed: number;
    readonly failed: number;
    readonly notSupported: number;
    readonly failures: readonly unknown[];
  }[];
}

let work: string;

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "conformance-test-"));
});

afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

async function runSuite(backend: "memory" | "kv"): Promise<{
  code: number | string;
  report: JsonReport;
  output: string;
}> {
  const json = join(work, `${backend}.json`);
  const r = await runToEnd(
    join(repoRoot, "bin", "ratelimit-conformance"),
    [
      "--launch",
      join(repoRoot, "bin", "ratelimit"),
      "--backend",
      backend,
      "--seed",
      "35",
      "--parallel",
      "2",
      "--json",
      json,
    ],
    {
      env: { PATH: process.env["PATH"] ?? "", HOME: process.env["HOME"] ?? "" },
    },
  );
  const report = JSON.parse(await readFile(json, "utf8")) as JsonReport;
  return { code: r.code, report, output: r.stdout + r.stderr };
}

describe.concurrent("ratelimit-conformance against this service", () => {
  it.each(["memory", "kv"] as const)(
    "passes every scenario on %s",
    async (backend) => {
      const { code, report, output } = await runSuite(backend);
      // The failures' requests, expected and actual answers are in the output.
      expect(report.failed, output).toBe(0);
      expect(code, output).toBe(0);
      // Replicas and a store freeze need a store: on memory their sections are not supported.
      // The output's Not supported block says why (a freeze row's numbers among them).
      expect(
        report.sections.filter((s) => s.notSupported > 0).map((s) => s.name),
        output,
      ).toEqual(
        backend === "memory"
          ? [
              "accuracy across replicas",
              "accuracy over a store freeze",
              ...[
                "sliding windows",
                "token buckets",
                "calendar windows",
                "several limits",
              ].map((a) => `accuracy across replicas and a freeze: ${a}`),
            ]
          : [],
      );
      expect(report.passed, output).toBeGreaterThanOrEqual(150);
      expect(Object.keys(report).sort()).toEqual(
        ["failed", "notSupported", "passed", "sections"].sort(),
      );
      for (const s of report.sections)
        expect(Object.keys(s).sort()).toEqual(
          ["failed", "failures", "name", "notSupported", "passed"].sort(),
        );
    },
    // A limit, not a measure: the kv run took 35 s beside the memory run on a shared 2-core machine.
    180_000,
  );
});
