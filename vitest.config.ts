import { defineConfig } from "vitest/config";
import { BaseSequencer, type TestSpecification } from "vitest/node";

// Two lanes on a 2-core machine. Measured (`vitest run --reporter=json`, 2 cores shared): the
// integration files used 271 s of CPU in 923 s of wall time one at a time, a first build of the
// container image 272 s of it; most integration files wait (process start, timeouts, windows, a
// build), and two at a time lose nothing (h2spec: 59 s alone, 62 s beside the CPU-bound fuzz
// file). The files below do not: they saturate the cores (attack suites, headless Chromium) or
// count calls per second of real time against a floor. They run alone, in a second group, after
// everything else. (outage-defaults failed beside another file: 55 answers where it wants 57.)
const alone = [
  "test/integration/h2-attacks.test.ts",
  "test/integration/rlqs-envoy.test.ts",
  "test/integration/rlqs-envoy-fake.test.ts",
  "test/integration/rlqs-replicas.test.ts",
  "test/integration/outage-defaults.test.ts",
  "test/integration/fault-kv.test.ts",
  "test/integration/fault-mc.test.ts",
  "test/integration/fault-lifecycle.test.ts",
  "test/integration/console-browser.test.ts",
  // Rebuilds dist/console, which console-browser serves.
  "test/integration/console-operations.test.ts",
];

// Started first in the first group: each waits minutes on a build or an install (the image's
// first build on a machine, npm pack and install), beside the rest instead of after it.
const first = [
  "test/integration/container-image.test.ts",
  "test/integration/package-install.test.ts",
];

/** Vitest's order (longest first by the last run, else largest file), with `first` in front. */
class LongWaitsFirst extends BaseSequencer {
  override async sort(
    files: TestSpecification[],
  ): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const rank = (spec: TestSpecification): number => {
      const i = first.findIndex((path) => spec.moduleId.endsWith(path));
      return i === -1 ? first.length : i;
    };
    return sorted
      .map((spec, index) => ({ spec, index }))
      .sort((a, b) => rank(a.spec) - rank(b.spec) || a.index - b.index)
      .map(({ spec }) => spec);
  }
}

// Vitest runs projects of one `sequence.groupOrder` in one pool, and refuses two of one group
// with different `maxWorkers`: the first group's three share two workers.
export default defineConfig({
  test: {
    sequence: { sequencer: LongWaitsFirst },
    projects: [
      {
        test: {
          name: "unit",
          include: ["test/unit/**/*.test.ts", "test/component/**/*.test.ts"],
          maxWorkers: 2,
          sequence: { groupOrder: 0 },
        },
      },
      {
        test: {
          name: "integration",
          include: ["test/integration/**/*.test.ts"],
          exclude: alone,
          testTimeout: 30_000,
          hookTimeout: 30_000,
          maxWorkers: 2,
          sequence: { groupOrder: 0 },
        },
      },
      {
        test: {
          // The integration files that must not share the machine (see `alone`).
          name: "integration-alone",
          include: alone,
          testTimeout: 30_000,
          hookTimeout: 30_000,
          fileParallelism: false,
          sequence: { groupOrder: 1 },
        },
      },
      {
        test: {
          // Seeded hostile inputs (≥ 100,000 per run); FUZZ_SEED=<n> replays a run.
          name: "fuzz",
          include: ["test/fuzz/**/*.test.ts"],
          testTimeout: 120_000,
          hookTimeout: 30_000,
          maxWorkers: 2,
          sequence: { groupOrder: 0 },
        },
      },
    ],
  },
});
