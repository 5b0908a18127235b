import { describe, expect, it } from "vitest";
import type { Scenario, Section } from "../../../src/conformance/model.js";
import {
  planGroups,
  runSections,
  scenarioFile,
  seededRandom,
  slug,
  unitsOf,
  waitBeforeWindows,
} from "../../../src/conformance/runner.js";
import { allSections } from "../../../src/conformance/scenarios/index.js";
import type {
  Session,
  TargetProvider,
} from "../../../src/conformance/targets.js";
import type { WireClient } from "../../../src/conformance/wire.js";
import { fromJson, jsonBody } from "../../../src/conformance/wire.js";

describe("the scenario tables", () => {
  it("hold at least 150 scenarios, ids unique per section, each naming a spec section", () => {
    const total = allSections.reduce((n, s) => n + s.scenarios.length, 0);
    expect(total).toBeGreaterThanOrEqual(150);
    for (const s of allSections) {
      const ids = s.scenarios.map((c) => c.id);
      expect(new Set(ids).size, s.name).toBe(ids.length);
      for (const c of s.scenarios)
        expect(c.spec, `${s.name}/${c.id}`).not.toBe("");
      expect(s.scenarios.length, s.name).toBeGreaterThan(0);
    }
    const slugs = allSections.map((s) => slug(s.name));
    expect(new Set(slugs).size).toBe(slugs.length);
  });
});

describe("slug and seededRandom", () => {
  it("makes section names usable in --only and domains", () => {
    expect(slug("config errors in files")).toBe("config-errors-in-files");
    expect(slug("hits_addend")).toBe("hits-addend");
  });

  it("repeats its numbers for one seed", () => {
    const a = seededRandom(9);
    const b = seededRandom(9);
    const c = seededRandom(10);
    const first = [a(), a(), a()];
    expect([b(), b(), b()]).toEqual(first);
    expect(c()).not.toBe(first[0]);
    for (const x of first) expect(x >= 0 && x < 1).toBe(true);
  });
});

describe("windows", () => {
  it("finds the units of a config", () => {
    expect([
      ...unitsOf([
        { key: "a", rate_limit: { unit: "second" } },
        { key: "b", descriptors: [{ rate_limits: [{ unit: "HOUR" }] }] },
      ]),
    ]).toEqual(["SECOND", "HOUR"]);
  });

  it("waits past a window end that is too close, and not otherwise", () => {
    const minute = Date.UTC(2026, 11, 2, 15, 41, 0, 0);
    expect(waitBeforeWindows(new Set(["MINUTE"]), minute - 10_000)).toBe(0);
    expect(waitBeforeWindows(new Set(["MINUTE"]), minute - 2_000)).toBe(2_050);
    expect(waitBeforeWindows(new Set(["SECOND"]), minute - 500)).toBe(550);
    expect(waitBeforeWindows(new Set(["SECOND"]), minute - 700)).toBe(0);
    expect(waitBeforeWindows(new Set(["DAY"]), minute)).toBe(0);
  });
});

describe("planGroups", () => {
  const plain: Section = { name: "a", scenarios: [] };
  const settings: Section = {
    name: "b",
    settings: { globalShadowMode: true },
    scenarios: [],
  };
  const reload: Section = { name: "c", reloads: true, scenarios: [] };
  const beyond: Section = { name: "d", beyondSpec: true, scenarios: [] };

  it("launch mode: plain sections share a server, the rest have their own, reloads first", () => {
    expect(planGroups([plain, settings, reload, beyond], true)).toEqual({
      shared: [plain],
      alone: [reload, settings, beyond],
      skipped: [],
    });
  });

  it("running mode: sections needing settings are skipped, reloads last", () => {
    expect(planGroups([plain, reload, settings, beyond], false)).toEqual({
      shared: [plain],
      alone: [beyond, reload],
      skipped: [settings],
    });
  });
});

describe("config files and the /json body", () => {
  it("writes a scenario's file under its own domain", () => {
    const section: Section = { name: "key-only rules", scenarios: [] };
    const file = scenarioFile("tok", section, {
      id: "x",
      title: "t",
      spec: "s",
      config: [{ key: "k", rate_limit: { unit: "day", requests_per_unit: 1 } }],
    });
    expect(file).toEqual({
      name: "tok-key-only-rules-x",
      text: "domain: tok-key-only-rules-x\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requests_per_unit: 1\n",
    });
  });

  it("sends lower camel case and reads proto3 JSON with omitted defaults", () => {
    expect(
      JSON.parse(
        jsonBody({
          domain: "d",
          hitsAddend: 2,
          descriptors: [{ entries: [["k", "v"]], hitsAddend: 0 }],
        }),
      ),
    ).toEqual({
      domain: "d",
      hitsAddend: 2,
      descriptors: [{ entries: [{ key: "k", value: "v" }], hitsAddend: "0" }],
    });
    expect(
      fromJson({
        overallCode: "OVER_LIMIT",
        statuses: [
          {
            code: "OVER_LIMIT",
            currentLimit: { requestsPerUnit: 1, unit: "MINUTE" },
            durationUntilReset: "42s",
          },
          { code: "OK" },
        ],
      }),
    ).toEqual({
      overallCode: "OVER_LIMIT",
      statuses: [
        {
          code: "OVER_LIMIT",
          currentLimit: { requestsPerUnit: 1, unit: "MINUTE" },
          limitRemaining: 0,
          durationUntilReset: 42,
        },
        {
          code: "OK",
          currentLimit: null,
          limitRemaining: 0,
          durationUntilReset: null,
        },
      ],
      headers: [],
    });
    expect(() => fromJson({ statuses: [{ code: "MAYBE" }] })).toThrow(
      "unknown code",
    );
    expect(() => fromJson({ statuses: [{ durationUntilReset: 5 }] })).toThrow(
      "not a proto3 JSON duration",
    );
  });
});

describe("runSections", () => {
  /** A launch-mode provider whose sessions answer nothing (the scenarios here call nothing). */
  const provider: TargetProvider = {
    description: "fake",
    canApplySettings: true,
    noReplicas: undefined,
    open(): Promise<Session> {
      const client = {} as unknown as WireClient;
      return Promise.resolve({
        client,
        replicas: [client],
        store: { freeze: () => undefined, thaw: () => undefined },
        files: {
          write: () => Promise.resolve(),
          remove: () => Promise.resolve(),
          settle: () => Promise.resolve(true),
        },
        close: () => Promise.resolve(),
      } as unknown as Session);
    },
    close: () => Promise.resolve(),
  };

  /** Scenarios that record how many of them run at once. */
  function counting(n: number): { scenarios: Scenario[]; most: () => number } {
    let running = 0;
    let most = 0;
    const scenarios = Array.from({ length: n }, (_, i): Scenario => ({
      id: `s${i}`,
      title: `scenario ${i}`,
      spec: "none",
      async run() {
        running++;
        most = Math.max(most, running);
        await new Promise((resolve) => setImmediate(resolve));
        await new Promise((resolve) => setImmediate(resolve));
        running--;
      },
    }));
    return { scenarios, most: () => most };
  }

  it("runs the scenarios of a section with a store of its own one at a time (a freeze is theirs alone)", async () => {
    const frozen = counting(4);
    const plain = counting(4);
    const results = await runSections(
      [
        { name: "frozen", ownStore: true, scenarios: frozen.scenarios },
        { name: "plain", scenarios: plain.scenarios },
      ],
      provider,
      { seed: 1, token: "t", concurrency: 4, parallelSessions: 1 },
    );
    expect(results.flatMap((r) => r.results.map((x) => x.status))).toEqual(
      Array.from({ length: 8 }, () => "passed"),
    );
    expect(frozen.most()).toBe(1);
    expect(plain.most()).toBe(4);
  });
});
