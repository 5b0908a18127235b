import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runClient } from "../../src/cli/client.js";
import { runConfigCheck } from "../../src/cli/config-check.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";

const config = `domain: rl
descriptors:
  - key: category
    value: account
    rate_limit: { unit: hour, requests_per_unit: 1 }
  - key: user
    descriptors:
      - key: path
        value: "/api/*"
        rate_limit: { unit: hour, requests_per_unit: 10 }
`;

async function client(t: TestApp, ...args: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runClient(
    ["-dial_string", t.addresses.grpc, "-domain", "rl", ...args],
    (l) => out.push(l),
    (l) => err.push(l),
  );
  return { code, out: out.join("\n"), err: err.join("\n") };
}

describe("ratelimit-client -explain", () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp(
      { "rl.yaml": config },
      { DISABLE_STATS: "true", EXPLAIN_ENABLED: "true" },
    );
  });
  afterAll(async () => {
    await t.stop();
  });

  it("prints the path, rule, counter and decision as a tree", async () => {
    const r = await client(t, "-explain", "-descriptors", "category=account");
    expect(r.code).toBe(0);
    expect(r.out).toContain(
      "path[0]: category=account → exact value rl.category_account  (rl.yaml:3)",
    );
    expect(r.out).toContain(
      "rule: rl.category_account 1 per HOUR  (rl.yaml:3)",
    );
    expect(r.out).toMatch(/counter: rl_category_account_\d+ = 0 → 1/);
    expect(r.out).toContain("decision: near limit → OK, 0 remaining");
  });

  it("marks the deciding descriptor once over the limit", async () => {
    await client(t, "-descriptors", "category=account");
    const r = await client(
      t,
      "-explain",
      "-descriptors",
      "user=u1,path=/api/x",
      "-descriptors",
      "category=account",
    );
    expect(r.out).toContain("descriptors[1] category=account  ◀ decides");
    expect(r.out).toContain(
      "path[1]: path=/api/x → wildcard rl.user.path_/api/*",
    );
    expect(r.out).toContain("overall: OVER_LIMIT");
  });

  it("prints proto3 JSON with -json", async () => {
    const r = await client(
      t,
      "-explain",
      "-json",
      "-descriptors",
      "category=account",
    );
    const json = JSON.parse(r.out) as {
      descriptors: { path: { outcome: string }[]; counter: { key: string } }[];
    };
    expect(json.descriptors[0]!.path[0]!.outcome).toBe("OUTCOME_EXACT");
    expect(json.descriptors[0]!.counter.key).toMatch(/^rl_category_account_/);
  });
});

describe("ratelimit-config-check -explain", () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "explain-check-"));
    writeFileSync(join(dir, "rl.yaml"), config);
  });
  afterAll(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it("explains offline: match path and rule, no counters", () => {
    const out: string[] = [];
    const code = runConfigCheck(
      ["-config_dir", dir, "-explain", "rl:user=u,path=/api/v2;nope=1"],
      (l) => out.push(l),
    );
    expect(code).toBe(0);
    const text = out.join("\n");
    expect(text).toContain("domain rl (backend none, offline)");
    expect(text).toContain(
      `path[1]: path=/api/v2 → wildcard rl.user.path_/api/*  (${join(dir, "rl.yaml")}:8)`,
    );
    expect(text).toContain("path[0]: nope=1 → no such key: stop, no limit");
    expect(text).not.toContain("counter:");
  });

  it("refuses a malformed -explain", () => {
    const err: string[] = [];
    const code = runConfigCheck(
      ["-config_dir", dir, "-explain", "no-colon"],
      () => undefined,
      (l) => err.push(l),
    );
    expect(code).toBe(2);
    expect(err.join("\n")).toContain("invalid -explain");
  });
});
