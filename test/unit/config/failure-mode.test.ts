import { describe, expect, it } from "vitest";
import { ConfigError } from "../../../src/config/config-error.js";
import { loadConfig } from "../../../src/config/load-config.js";
import { parseConfigFile } from "../../../src/config/parse-config-file.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";

const rules = `descriptors:
  - key: k
    rate_limit: { unit: minute, requests_per_unit: 1 }
`;

function load(files: Record<string, string>, mergeDomainConfig = false) {
  return loadConfig(
    Object.entries(files).map(([name, text]) => ({ name, text })),
    { statsManager: createStatsManager(), mergeDomainConfig },
  );
}

describe("failure_mode (domain level)", () => {
  it("is absent unless written, and null counts as absent", () => {
    expect(parseConfigFile("a.yaml", `domain: a\n${rules}`).failureMode).toBe(
      undefined,
    );
    expect(
      parseConfigFile("a.yaml", `domain: a\nfailure_mode:\n${rules}`)
        .failureMode,
    ).toBe(undefined);
    expect(
      parseConfigFile("a.yaml", `domain: a\nfailure_mode: deny\n${rules}`)
        .failureMode,
    ).toBe("deny");
  });

  it("maps each domain that sets it to its mode", () => {
    const config = load({
      "a.yaml": `domain: a\nfailure_mode: deny\n${rules}`,
      "b.yaml": `domain: b\n${rules}`,
      "c.yaml": `domain: c\nfailure_mode: local\n${rules}`,
    });
    expect([...(config.failureModes ?? new Map<string, string>())]).toEqual([
      ["a", "deny"],
      ["c", "local"],
    ]);
  });

  it("rejects an unknown mode, naming the file, the domain and the choices", () => {
    expect(() =>
      load({ "a.yaml": `domain: a\nfailure_mode: Deny\n${rules}` }),
    ).toThrow(
      new ConfigError(
        "a.yaml: invalid failure_mode 'Deny' for domain 'a' (expected one of error, allow, deny, local)",
      ),
    );
  });

  it("requires merged files of one domain to agree", () => {
    const other = `descriptors:
  - key: other
    rate_limit: { unit: minute, requests_per_unit: 1 }
`;
    expect(
      load(
        {
          "a.yaml": `domain: a\nfailure_mode: deny\n${rules}`,
          "b.yaml": `domain: a\n${other}`,
        },
        true,
      ).failureModes?.get("a"),
    ).toBe("deny");
    expect(() =>
      load(
        {
          "a.yaml": `domain: a\nfailure_mode: deny\n${rules}`,
          "b.yaml": `domain: a\nfailure_mode: allow\n${other}`,
        },
        true,
      ),
    ).toThrow(/b\.yaml: failure_mode 'allow' for domain 'a' conflicts/);
  });
});
