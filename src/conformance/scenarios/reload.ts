// Config errors and reloads: a change to a file reloads, a bad file fails the whole reload and
// the last good config keeps answering. These scenarios rewrite files, so they run one at a
// time, after every other section (in running mode) or on servers of their own (launch mode).
import { stringify } from "yaml";
import {
  Mismatch,
  type DescriptorConfig,
  type Scenario,
  type ScenarioContext,
  type Section,
} from "../model.js";
import { d, hit, none, ok, over, per, rule } from "./dsl.js";

/** How long a reload that must fail is given before the old config is checked, ms. */
const failedReloadWaitMs = 1_000;

function fileOf(
  domain: string,
  descriptors: readonly DescriptorConfig[],
): string {
  return stringify({ domain, descriptors });
}

async function mustLoad(ctx: ScenarioContext, what: string): Promise<void> {
  if (!(await ctx.files.settle()))
    throw new Mismatch(
      { reload: what },
      "the reload succeeds",
      "the probe never answered",
      `${what}: the reload did not happen`,
    );
}

async function mustNotLoad(ctx: ScenarioContext, what: string): Promise<void> {
  if (await ctx.files.settle(failedReloadWaitMs))
    throw new Mismatch(
      { reload: what },
      "the reload fails (the whole reload)",
      "the probe written with it answered",
      `${what}: the reload succeeded`,
    );
}

/**
 * A scenario that breaks the config with `bad` (a file of its own), then changes its own limit
 * from 3 to 1, checks that the old limit still answers, then removes
 * the bad file and checks that the change loads.
 */
function keepsLastGood(
  id: string,
  title: string,
  spec: string,
  bad: (domain: string) => string,
): Scenario {
  const start = [rule("k", undefined, per(3, "day"))];
  return {
    id,
    title,
    spec,
    config: start,
    async run(ctx) {
      await ctx.step(hit(d("k=a"), ok(2, [3, "DAY"])));
      // The bad file first: a server that reloads on every event must not load the change
      // before the bad file arrives.
      await ctx.files.write(`${ctx.domain}-bad`, bad(`${ctx.domain}-bad`));
      await ctx.files.write(
        ctx.domain,
        fileOf(ctx.domain, [rule("k", undefined, per(1, "day"))]),
      );
      try {
        await mustNotLoad(ctx, `${id} with a bad file`);
        await ctx.step(hit(d("k=a"), ok(1, [3, "DAY"])));
      } finally {
        await ctx.files.remove(`${ctx.domain}-bad`);
      }
      await mustLoad(ctx, `${id} after removing the bad file`);
      await ctx.step(hit(d("k=b"), ok(0, [1, "DAY"])));
    },
  };
}

const reloads: Scenario[] = [
  {
    id: "new-file",
    title: "a new file's domain answers after the reload",
    spec: "Configuration reload (file loading)",
    async run(ctx) {
      await ctx.step(hit(d("k=v"), none));
      await ctx.files.write(
        ctx.domain,
        fileOf(ctx.domain, [rule("k", undefined, per(2, "day"))]),
      );
      await mustLoad(ctx, "new file");
      await ctx.step(hit(d("k=v"), ok(1, [2, "DAY"])));
      await ctx.files.remove(ctx.domain);
      await mustLoad(ctx, "cleanup");
    },
  },
  {
    id: "changed-limit",
    title: "a changed limit applies after the reload",
    spec: "Configuration reload (file loading)",
    config: [rule("k", undefined, per(2, "hour"))],
    async run(ctx) {
      await ctx.step(hit(d("k=a"), ok(1, [2, "HOUR"])));
      await ctx.files.write(
        ctx.domain,
        fileOf(ctx.domain, [rule("k", undefined, per(5, "day"))]),
      );
      await mustLoad(ctx, "changed limit");
      await ctx.step(hit(d("k=b"), ok(4, [5, "DAY"])));
    },
  },
  {
    id: "removed-file",
    title: "a removed file's domain no longer answers with a limit",
    spec: "Configuration reload (Remove forces a reload)",
    config: [rule("k", undefined, per(2, "day"))],
    async run(ctx) {
      await ctx.step(hit(d("k=v"), ok(1, [2, "DAY"])));
      await ctx.files.remove(ctx.domain);
      await mustLoad(ctx, "removed file");
      await ctx.step(hit(d("k=v"), none));
    },
  },
  {
    id: "counters-kept",
    title: "a reload of other files keeps this rule's counter",
    spec: "Configuration reload; What the service does 1 (counters in the backend)",
    config: [rule("k", undefined, per(3, "day"))],
    async run(ctx) {
      await ctx.step(hit(d("k=v"), ok(2)));
      await ctx.step(hit(d("k=v"), ok(1)));
      await ctx.files.write(
        `${ctx.domain}-other`,
        fileOf(`${ctx.domain}-other`, [rule("x", undefined, per(1, "day"))]),
      );
      await mustLoad(ctx, "other file");
      await ctx.step(hit(d("k=v"), ok(0)));
      await ctx.step(hit(d("k=v"), over()));
      await ctx.files.remove(`${ctx.domain}-other`);
      await mustLoad(ctx, "cleanup");
    },
  },
  {
    id: "rule-added",
    title:
      "a rule added to a file applies after the reload, the others keep counting",
    spec: "Configuration reload (file loading)",
    config: [rule("a", undefined, per(2, "day"))],
    async run(ctx) {
      await ctx.step(hit(d("a=1"), ok(1)));
      await ctx.step(hit(d("b=1"), none));
      await ctx.files.write(
        ctx.domain,
        fileOf(ctx.domain, [
          rule("a", undefined, per(2, "day")),
          rule("b", undefined, per(1, "day")),
        ]),
      );
      await mustLoad(ctx, "rule added");
      await ctx.step(hit(d("b=1"), ok(0, [1, "DAY"])));
      await ctx.step(hit(d("a=1"), ok(0, [2, "DAY"])));
    },
  },
];

const fileErrors: Scenario[] = [
  keepsLastGood(
    "bad-yaml",
    "a file that is not YAML keeps the last good config",
    "Configuration reload; Domain; States",
    () => "domain: [unclosed\n  descriptors: {\n",
  ),
  keepsLastGood(
    "no-domain",
    "a file without a domain keeps the last good config",
    "Configuration file (domain required)",
    () => stringify({ descriptors: [rule("k", undefined, per(1, "day"))] }),
  ),
  keepsLastGood(
    "duplicate-domain",
    "two files with one domain keep the last good config",
    "Domain (MERGE_DOMAIN_CONFIG false)",
    (domain) =>
      fileOf(domain.replace(/-bad$/, ""), [
        rule("z", undefined, per(1, "day")),
      ]),
  ),
  keepsLastGood(
    "no-key",
    "a rule without a key keeps the last good config",
    "Descriptor rule (key required)",
    (domain) => fileOf(domain, [{ value: "v", rate_limit: per(1, "day") }]),
  ),
];

const limitErrors: Scenario[] = [
  keepsLastGood(
    "bad-unit",
    "an unknown unit keeps the last good config",
    "rate_limit block (unit enum)",
    (domain) =>
      fileOf(domain, [
        rule("k", undefined, { unit: "fortnight", requests_per_unit: 1 }),
      ]),
  ),
  keepsLastGood(
    "negative-limit",
    "a negative requests_per_unit keeps the last good config",
    "rate_limit block (unsigned integer)",
    (domain) =>
      fileOf(domain, [
        rule("k", undefined, { unit: "day", requests_per_unit: -1 }),
      ]),
  ),
  keepsLastGood(
    "no-unit",
    "a limit without a unit keeps the last good config",
    "rate_limit block (unit required unless unlimited)",
    (domain) =>
      fileOf(domain, [rule("k", undefined, { requests_per_unit: 1 })]),
  ),
  keepsLastGood(
    "share-no-wildcard",
    "share_threshold without a wildcard keeps the last good config",
    "Descriptor rule (share_threshold only with a trailing *)",
    (domain) =>
      fileOf(domain, [
        rule("k", "v", per(1, "day"), { share_threshold: true }),
      ]),
  ),
];

/**
 * The reload sections. Each has a server of its own in launch mode: a bad file fails every
 * reload while it is there, so the scenarios of one section run one at a time, and the
 * sections run beside each other.
 */
export const reloadSections: readonly Section[] = [
  { name: "config reload", reloads: true, scenarios: reloads },
  { name: "config errors in files", reloads: true, scenarios: fileErrors },
  { name: "config errors in limits", reloads: true, scenarios: limitErrors },
];
