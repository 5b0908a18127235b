// Runs sections against a target: groups them into sessions (one server per group of
// sections with the same needs), writes each scenario's config file, runs the scenarios
// (several at once, each on its own domain, except in sections that reload), and collects
// one result per scenario. Window-dependent scenarios never straddle a window boundary: a
// scenario that would start too close to the end of one of its windows waits for the next.
import { stringify } from "yaml";
import { differences, secondsToWindowEnd } from "./expect.js";
import {
  Mismatch,
  NotSupported,
  type AnswerView,
  type Scenario,
  type ScenarioContext,
  type ScenarioResult,
  type Section,
  type UnitName,
} from "./model.js";
import { delay } from "./processes.js";
import {
  SessionError,
  type ConfigFile,
  type Session,
  type TargetProvider,
} from "./targets.js";

/** How a run goes. */
export interface RunOptions {
  /** Seeds every random choice (values, order). */
  readonly seed: number;
  /** Unique in this run: prefixes domains and file names. */
  readonly token: string;
  /** Scenarios run at once within a section that does not reload. */
  readonly concurrency: number;
  /** Servers (groups of sections) run at once in launch mode. */
  readonly parallelSessions: number;
  /** The launched server's store; undefined in running mode. */
  readonly backend?: "memory" | "kv" | "mc";
  /** Called as each section ends (progress). */
  readonly onSection?: (
    section: Section,
    results: readonly ScenarioResult[],
  ) => void;
}

/** One section's results, in scenario order. */
export interface SectionResults {
  readonly section: Section;
  readonly results: readonly ScenarioResult[];
}

/** Lower-case words joined by `-`: a section's name in `--only` and in domains. */
export function slug(name: string): string {
  return name
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-|-$/g, "");
}

/** A seeded generator of numbers in [0, 1) (mulberry32). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

function hash(text: string): number {
  let h = 2_166_136_261;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 16_777_619);
  }
  return h >>> 0;
}

/** The domain (and config file name) of a scenario. */
export function scenarioDomain(
  token: string,
  section: Section,
  scenario: Scenario,
): string {
  return `${token}-${slug(section.name)}-${scenario.id}`;
}

/** The config file of a scenario, or undefined when it has none. */
export function scenarioFile(
  token: string,
  section: Section,
  scenario: Scenario,
): ConfigFile | undefined {
  if (scenario.config === undefined) return undefined;
  const domain = scenarioDomain(token, section, scenario);
  return {
    name: domain,
    text: stringify({
      domain,
      ...(scenario.fileExtra ?? {}),
      descriptors: scenario.config,
    }),
  };
}

const windowUnits: Readonly<Record<string, UnitName>> = {
  second: "SECOND",
  minute: "MINUTE",
  hour: "HOUR",
  day: "DAY",
  week: "WEEK",
  month: "MONTH",
  year: "YEAR",
};

/** The units a scenario's config uses (its windows). */
export function unitsOf(
  value: unknown,
  found = new Set<UnitName>(),
): Set<UnitName> {
  if (Array.isArray(value)) {
    for (const v of value) unitsOf(v, found);
  } else if (typeof value === "object" && value !== null) {
    for (const [k, v] of Object.entries(value)) {
      if (k === "unit" && typeof v === "string") {
        const unit = windowUnits[v.toLowerCase()];
        if (unit !== undefined) found.add(unit);
      } else {
        unitsOf(v, found);
      }
    }
  }
  return found;
}

/**
 * Milliseconds to wait so that a scenario using `units` starts well inside each of its
 * windows: at least 0.6 s before a second ends, 3 s before any longer window ends.
 */
export function waitBeforeWindows(
  units: ReadonlySet<UnitName>,
  nowMs: number,
): number {
  let wait = 0;
  for (const unit of units) {
    const leftMs =
      (secondsToWindowEnd(unit, nowMs) - 1) * 1000 + (1000 - (nowMs % 1000));
    const needMs = unit === "SECOND" ? 600 : 3_000;
    if (leftMs < needMs) wait = Math.max(wait, leftMs + 50);
  }
  return wait;
}

async function runScenario(
  section: Section,
  scenario: Scenario,
  session: Session,
  options: RunOptions,
): Promise<ScenarioResult> {
  const domain = scenarioDomain(options.token, section, scenario);
  const random = seededRandom(
    options.seed ^ hash(`${section.name}/${scenario.id}`),
  );
  let uniques = 0;
  const notes: string[] = [];
  const ctx: ScenarioContext = {
    note: (text) => notes.push(text),
    backend: options.backend,
    store: session.store,
    callReplica: (index, request) =>
      (
        session.replicas[index % session.replicas.length] ?? session.client
      ).call(request),
    domain,
    random,
    unique: (prefix = "v") =>
      `${prefix}${++uniques}${Math.floor(random() * 1e9).toString(36)}`,
    call: (request, via) => session.client.call(request, via),
    http: (method, path, body) => session.client.http(method, path, body),
    files: session.files,
    async step(step): Promise<AnswerView | undefined> {
      const request = {
        domain: step.domain ?? domain,
        descriptors: step.descriptors,
        ...(step.hitsAddend !== undefined
          ? { hitsAddend: step.hitsAddend }
          : {}),
      };
      const via = step.via ?? "grpc";
      const sentMs = Date.now();
      const outcome = await session.client.call(request, via);
      const problems = differences(step.expect, outcome, {
        sentMs,
        answeredMs: Date.now(),
      });
      if (problems.length > 0)
        throw new Mismatch(
          { via, ...request },
          step.expect,
          outcome.kind === "answer" ? outcome.answer : { error: outcome.error },
          problems.join("; "),
        );
      return outcome.kind === "answer" ? outcome.answer : undefined;
    },
  };
  const wait = waitBeforeWindows(unitsOf(scenario.config ?? []), Date.now());
  if (wait > 0) await delay(wait);
  try {
    for (const step of scenario.steps ?? []) await ctx.step(step);
    if (scenario.run !== undefined) await scenario.run(ctx);
    return { status: "passed", notes };
  } catch (error) {
    if (error instanceof NotSupported)
      return { status: "notSupported", reason: error.message };
    if (error instanceof Mismatch)
      return {
        status: "failed",
        request: error.request,
        expected: error.expected,
        actual: error.actual,
        message: error.message,
        notes,
      };
    return {
      status: "failed",
      request: null,
      expected: null,
      actual: null,
      message: `the scenario broke: ${String(error)}`,
    };
  }
}

async function runPool<T>(
  items: readonly T[],
  concurrency: number,
  work: (item: T, index: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const index = next++;
      await work(items[index] as T, index);
    }
  };
  await Promise.all(
    Array.from(
      { length: Math.max(1, Math.min(concurrency, items.length)) },
      worker,
    ),
  );
}

async function runSectionOn(
  section: Section,
  session: Session,
  options: RunOptions,
): Promise<ScenarioResult[]> {
  const results: ScenarioResult[] = new Array<ScenarioResult>(
    section.scenarios.length,
  );
  let scenarios = section.scenarios.map((s, i) => ({ s, i }));
  if (section.beyondSpec === true && scenarios.length > 0) {
    // The first scenario is the feature probe: failing it means the server ignores the feature.
    const [first, ...rest] = scenarios;
    if (first !== undefined) {
      const probe = await runScenario(section, first.s, session, options);
      if (probe.status !== "passed") {
        const reason =
          probe.status === "failed"
            ? `the server ignores the feature (${first.s.id}: ${probe.message})`
            : probe.reason;
        return section.scenarios.map(() => ({
          status: "notSupported",
          reason,
        }));
      }
      results[first.i] = probe;
    }
    scenarios = rest;
  }
  const order = shuffled(
    scenarios,
    seededRandom(options.seed ^ hash(section.name)),
  );
  await runPool(
    order,
    // A reload, or a store freeze, is seen by every scenario running beside it: one at a time.
    section.reloads === true || section.ownStore === true
      ? 1
      : options.concurrency,
    async ({ s, i }) => {
      results[i] = await runScenario(section, s, session, options);
    },
  );
  return results;
}

function shuffled<T>(items: readonly T[], random: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}

function allResults(
  section: Section,
  result: ScenarioResult,
): ScenarioResult[] {
  return section.scenarios.map(() => result);
}

/** Groups of sections that share one session, in run order. */
export function planGroups(
  sections: readonly Section[],
  canApplySettings: boolean,
): {
  readonly shared: Section[];
  readonly alone: Section[];
  readonly skipped: Section[];
} {
  const shared: Section[] = [];
  const alone: Section[] = [];
  const skipped: Section[] = [];
  for (const s of sections) {
    const needsLaunch =
      s.settings !== undefined ||
      s.ownServer === true ||
      s.ownStore === true ||
      (s.replicas ?? 1) > 1;
    if (needsLaunch && !canApplySettings) skipped.push(s);
    else if (needsLaunch || s.reloads === true || s.beyondSpec === true)
      alone.push(s);
    else shared.push(s);
  }
  // Running mode: reloading sections last, since a reload they break would hide another
  // section's files. Launch mode: first, as they take longest (each has its own server).
  const late = (s: Section): number => Number(s.reloads === true);
  alone.sort((a, b) =>
    canApplySettings ? late(b) - late(a) : late(a) - late(b),
  );
  return { shared, alone, skipped };
}

/**
 * Runs `sections` against `provider` and returns one result per scenario, sections in the
 * given order. Never throws for a server's misbehaviour: that is a failed (or, beyond the
 * spec, not supported) scenario.
 */
export async function runSections(
  sections: readonly Section[],
  provider: TargetProvider,
  options: RunOptions,
): Promise<SectionResults[]> {
  const byName = new Map<Section, ScenarioResult[]>();
  const done = (section: Section, results: ScenarioResult[]): void => {
    byName.set(section, results);
    options.onSection?.(section, results);
  };
  const noReplicas = provider.noReplicas;
  const wanted = sections.filter((s) => {
    const needsStore = (s.replicas ?? 1) > 1 || s.ownStore === true;
    if (!needsStore || noReplicas === undefined) return true;
    done(s, allResults(s, { status: "notSupported", reason: noReplicas }));
    return false;
  });
  const { shared, alone, skipped } = planGroups(
    wanted,
    provider.canApplySettings,
  );
  for (const s of skipped)
    done(
      s,
      allResults(s, {
        status: "notSupported",
        reason: "needs server settings of its own: launch mode only",
      }),
    );
  const openFor = async (
    group: readonly Section[],
  ): Promise<Session | ScenarioResult> => {
    const files = group.flatMap((section) =>
      section.ownServer === true
        ? []
        : section.scenarios.flatMap((scenario) => {
            const f = scenarioFile(options.token, section, scenario);
            return f === undefined ? [] : [f];
          }),
    );
    const settings = group[0]?.settings ?? {};
    try {
      return await provider.open(
        files,
        settings,
        group[0]?.ownServer !== true,
        {
          replicas: group[0]?.replicas ?? 1,
          ownStore: group[0]?.ownStore === true,
        },
      );
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      const refused = error instanceof SessionError && error.configRefused;
      if (refused && group.every((s) => s.beyondSpec === true))
        return {
          status: "notSupported",
          reason: `the server refused the config (${message.split("\n")[0] ?? ""})`,
        };
      return {
        status: "failed",
        request: null,
        expected: "a server that loads the section's config files",
        actual: null,
        message: `no session: ${message}`,
      };
    }
  };
  // Launch mode gives every group a server and a directory of its own, so groups may run at
  // once; a running server has one directory, and a reload there is seen by every group.
  const groups = [
    ...(shared.length > 0 ? [shared] : []),
    ...alone.map((s) => [s]),
  ];
  await runPool(
    groups,
    provider.canApplySettings ? options.parallelSessions : 1,
    async (group) => {
      const session = await openFor(group);
      if ("status" in session) {
        for (const s of group) done(s, allResults(s, session));
        return;
      }
      try {
        for (const s of group) done(s, await runSectionOn(s, session, options));
      } finally {
        await session.close();
      }
    },
  );
  return sections.map((section) => ({
    section,
    results: byName.get(section) ?? [],
  }));
}
