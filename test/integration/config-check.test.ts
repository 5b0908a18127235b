import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { runConfigCheck } from "../../src/cli/config-check.js";

const domainYaml = (domain: string, key = "k"): string =>
  `domain: ${domain}\ndescriptors:\n  - key: ${key}\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n`;

/** Runs the check and returns its exit code with every printed line. */
function check(argv: readonly string[]): { code: number; lines: string[] } {
  const lines: string[] = [];
  const code = runConfigCheck(argv, (line) => lines.push(line));
  return { code, lines };
}

describe("runConfigCheck", () => {
  let dir: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), "rls-config-check-"));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("accepts a valid directory and prints each file in name order", async () => {
    await writeFile(join(dir, "b.yaml"), domainYaml("two"));
    await writeFile(join(dir, "a.yaml"), domainYaml("one"));
    const { code, lines } = check(["-config_dir", dir]);
    expect(lines).toEqual([
      "checking rate limit configs...",
      `loading config directory: ${dir}`,
      `opening config file: ${dir}/a.yaml`,
      `opening config file: ${dir}/b.yaml`,
      "all rate limit configs ok",
    ]);
    expect(code).toBe(0);
  });

  it("accepts the --name=value and -name=value spellings", async () => {
    await writeFile(join(dir, "a.yaml"), domainYaml("one"));
    expect(check([`--config_dir=${dir}`]).code).toBe(0);
    expect(check([`-config_dir=${dir}`]).code).toBe(0);
  });

  it("accepts an empty directory", () => {
    const { code, lines } = check(["-config_dir", dir]);
    expect(code).toBe(0);
    expect(lines.at(-1)).toBe("all rate limit configs ok");
  });

  it("rejects a bad unit with a message naming the file", async () => {
    await writeFile(join(dir, "a.yaml"), domainYaml("one"));
    await writeFile(
      join(dir, "bad.yaml"),
      "domain: two\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
    );
    const { code, lines } = check(["-config_dir", dir]);
    expect(code).toBe(1);
    expect(lines.at(-1)).toMatch(
      new RegExp(
        `^error loading rate limit configs: ${escape(join(dir, "bad.yaml"))}: `,
      ),
    );
    expect(lines.at(-1)).toContain("fortnight");
  });

  it("reports YAML errors as config errors instead of crashing", async () => {
    await writeFile(join(dir, "broken.yaml"), "domain: [unclosed\n");
    const { code, lines } = check(["-config_dir", dir]);
    expect(code).toBe(1);
    expect(lines.at(-1)).toMatch(
      new RegExp(
        `^error loading rate limit configs: ${escape(join(dir, "broken.yaml"))}: `,
      ),
    );
  });

  it("reports an unknown key as a config error", async () => {
    await writeFile(join(dir, "a.yaml"), `${domainYaml("one")}colour: blue\n`);
    const { code, lines } = check(["-config_dir", dir]);
    expect(code).toBe(1);
    expect(lines.at(-1)).toMatch(
      /^error loading rate limit configs: .*a\.yaml: /,
    );
  });

  it("parses every entry whatever its extension", async () => {
    await writeFile(join(dir, "a.yaml"), domainYaml("one"));
    await writeFile(join(dir, "notes.txt"), "this is not: [a config\n");
    const { code, lines } = check(["-config_dir", dir]);
    expect(lines).toContain(`opening config file: ${dir}/notes.txt`);
    expect(code).toBe(1);
    expect(lines.at(-1)).toContain(join(dir, "notes.txt"));
  });

  it("rejects a domain in two files unless -merge_domain_configs is set", async () => {
    await writeFile(join(dir, "a.yaml"), domainYaml("same", "k1"));
    await writeFile(join(dir, "b.yaml"), domainYaml("same", "k2"));
    const separate = check(["-config_dir", dir]);
    expect(separate.code).toBe(1);
    expect(separate.lines.at(-1)).toMatch(
      /^error loading rate limit configs: /,
    );
    const merged = check(["-config_dir", dir, "-merge_domain_configs"]);
    expect(merged.lines.at(-1)).toBe("all rate limit configs ok");
    expect(merged.code).toBe(0);
  });

  it("fails when the directory cannot be opened", () => {
    const missing = join(dir, "missing");
    const { code, lines } = check(["-config_dir", missing]);
    expect(code).toBe(1);
    expect(lines.slice(0, 2)).toEqual([
      "checking rate limit configs...",
      `loading config directory: ${missing}`,
    ]);
    expect(lines.at(-1)).toMatch(
      new RegExp(`^error opening directory ${escape(missing)}: `),
    );
  });

  it("fails on an entry that cannot be read, such as a subdirectory", async () => {
    await writeFile(join(dir, "a.yaml"), domainYaml("one"));
    await mkdir(join(dir, "sub"));
    const { code, lines } = check(["-config_dir", dir]);
    expect(code).toBe(1);
    expect(lines.at(-2)).toBe(`opening config file: ${dir}/sub`);
    expect(lines.at(-1)).toMatch(
      new RegExp(`^error reading file ${escape(join(dir, "sub"))}: `),
    );
  });

  it("prints usage for -h and fails with exit code 2 on an unknown flag", () => {
    const help = check(["-h"]);
    expect(help.code).toBe(0);
    expect(help.lines.join("\n")).toContain("-config_dir");
    expect(help.lines.join("\n")).toContain("-merge_domain_configs");

    const errors: string[] = [];
    const code = runConfigCheck(
      ["-nope"],
      () => undefined,
      (line) => errors.push(line),
    );
    expect(code).toBe(2);
    expect(errors[0]).toBe("flag provided but not defined: -nope");
  });
});

describe("runConfigCheck with the Go reference's variable names", () => {
  it("prints one warning per name on the error stream, and checks as usual", async () => {
    const dir = await mkdtemp(join(tmpdir(), "rls-config-check-legacy-"));
    try {
      await writeFile(join(dir, "a.yaml"), domainYaml("one"));
      const out: string[] = [];
      const errors: string[] = [];
      const code = runConfigCheck(
        ["-config_dir", dir],
        (line) => out.push(line),
        (line) => errors.push(line),
        {
          REDIS_URL: "localhost:6379",
          USE_DOG_STATSD: "true",
          DOG_STATSD_MOGRIFIER_m_NAME: "x",
          KV_URL: "localhost:6379",
        },
      );
      expect(code).toBe(0);
      expect(errors).toEqual([
        "warning: REDIS_URL is the Go reference's name and is ignored: set KV_URL",
        "warning: USE_DOG_STATSD is the Go reference's name and is ignored: set USE_TAGGED_PUSHSTATS",
        "warning: DOG_STATSD_MOGRIFIER_m_NAME is the Go reference's name and is ignored: set TAGGED_PUSHSTATS_MOGRIFIERS_m_NAME",
      ]);
      expect(out).toEqual([
        "checking rate limit configs...",
        `loading config directory: ${dir}`,
        `opening config file: ${dir}/a.yaml`,
        "all rate limit configs ok",
      ]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("prints no warning without them", () => {
    const errors: string[] = [];
    runConfigCheck(
      ["-config_dir", "/nonexistent-rls-dir"],
      () => undefined,
      (line) => errors.push(line),
      { KV_URL: "h:1", PATH: "/bin" },
    );
    expect(errors).toEqual([]);
  });
});

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
