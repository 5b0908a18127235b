import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    projects: [
      {
        test: {
          name: "unit",
          include: ["test/unit/**/*.test.ts", "test/component/**/*.test.ts"],
        },
      },
      {
        test: {
          name: "integration",
          include: ["test/integration/**/*.test.ts"],
          testTimeout: 30_000,
          hookTimeout: 30_000,
          // Integration files spawn servers; keep them from fighting for 2 cores.
          fileParallelism: false,
        },
      },
      {
        test: {
          // Seeded hostile inputs (≥ 100,000 per run); FUZZ_SEED=<n> replays a run.
          name: "fuzz",
          include: ["test/fuzz/**/*.test.ts"],
          testTimeout: 120_000,
          hookTimeout: 30_000,
        },
      },
    ],
  },
});
