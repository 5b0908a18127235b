import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { windowAlignedClock } from "../helpers/aligned-clock.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { waitFor } from "../helpers/wait-for.js";

const config = `
domain: rl
descriptors:
  - key: foo
    descriptors:
      - key: baz
        value: not-so-shady
        rate_limit: { unit: minute, requests_per_unit: 3 }
      - key: bar
        value: bkthomps
        rate_limit: { name: bkthomps, unit: minute, requests_per_unit: 1 }
      - key: bay
        rate_limit: { unlimited: true }
  - key: category
    value: account
    rate_limit: { unit: minute, requests_per_unit: 4 }
  - key: reload
    rate_limit: { unit: minute, requests_per_unit: 1 }
`;

let t: TestApp;
beforeAll(async () => {
  // Two hits on a 1-per-minute rule below: a clock 1 s into a minute keeps them in one window.
  t = await startTestApp({ "rl.yaml": config }, {}, undefined, {
    clock: windowAlignedClock(60),
  });
});
afterAll(async () => {
  await t.stop();
});

async function postJson(
  body: string,
): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`http://${t.addresses.http}/json`, {
    method: "POST",
    body,
  });
  return {
    status: res.status,
    json: (await res.json()) as Record<string, unknown>,
  };
}

describe("POST /json", () => {
  it("returns the proto3 JSON fields of the spec with 200, then 429 over the limit", async () => {
    const body = JSON.stringify({
      domain: "rl",
      descriptors: [
        {
          entries: [
            { key: "foo", value: "x" },
            { key: "bar", value: "bkthomps" },
          ],
        },
      ],
    });
    const first = await postJson(body);
    expect(first.status).toBe(200);
    expect(first.json["overallCode"]).toBe("OK");
    const status = (first.json["statuses"] as Record<string, unknown>[])[0]!;
    expect(status["code"]).toBe("OK");
    // Go's key order: name first.
    expect(Object.keys(status["currentLimit"] as object)).toEqual([
      "name",
      "requestsPerUnit",
      "unit",
    ]);
    expect(status["currentLimit"]).toEqual({
      name: "bkthomps",
      requestsPerUnit: 1,
      unit: "MINUTE",
    });
    expect(status["durationUntilReset"]).toMatch(/^\d+s$/);
    expect(status["limitRemaining"]).toBeUndefined();
    const second = await postJson(body);
    expect(second.status).toBe(429);
    expect(second.json["overallCode"]).toBe("OVER_LIMIT");
  });

  it("answers the wire-contract worked example shape", async () => {
    const res = await postJson(
      JSON.stringify({
        domain: "rl",
        descriptors: [
          {
            entries: [
              { key: "foo", value: "pelle" },
              { key: "baz", value: "not-so-shady" },
            ],
          },
          { entries: [{ key: "category", value: "account" }] },
          {
            entries: [
              { key: "foo", value: "x" },
              { key: "bay", value: "y" },
            ],
          },
          { entries: [{ key: "nope", value: "z" }] },
        ],
      }),
    );
    expect(res.status).toBe(200);
    const statuses = res.json["statuses"] as Record<string, unknown>[];
    expect(statuses.map((s) => s["limitRemaining"])).toEqual([
      2,
      3,
      4294967295,
      undefined,
    ]);
    expect(statuses[3]).toEqual({ code: "OK" });
    expect(statuses[2]).toEqual({ code: "OK", limitRemaining: 4294967295 });
  });

  it("accepts snake_case names and a string per-descriptor hits addend", async () => {
    const res = await postJson(
      '{"domain":"rl","hits_addend":2,"descriptors":[{"entries":[{"key":"foo","value":"h"},{"key":"baz","value":"not-so-shady"}],"hitsAddend":"4"}]}',
    );
    expect(res.status).toBe(429);
  });

  const bad: [string, string, number, string][] = [
    ["malformed JSON", "{not json", 400, "not valid JSON"],
    ["an empty body", "", 400, "empty body"],
    [
      "an unknown field",
      '{"domain":"rl","descriptors":[],"bogus":1}',
      400,
      "bogus",
    ],
    [
      "an empty domain",
      '{"domain":"","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}',
      400,
      "rate limit domain must not be empty",
    ],
    [
      "no descriptors",
      '{"domain":"rl"}',
      400,
      "rate limit descriptor list must not be empty",
    ],
    [
      "an entry with an empty key",
      '{"domain":"rl","descriptors":[{"entries":[{"key":"","value":"b"}]}]}',
      400,
      "descriptors[0].entries[0].key",
    ],
    [
      "an override with unit UNKNOWN",
      '{"domain":"rl","descriptors":[{"entries":[{"key":"a","value":"b"}],"limit":{"requestsPerUnit":1,"unit":"UNKNOWN"}}]}',
      400,
      "descriptors[0].limit.unit",
    ],
    ["a wrong type", '{"domain":5,"descriptors":[]}', 400, "domain"],
  ];
  for (const [what, body, status, message] of bad) {
    it(`answers ${what} with ${status} and a JSON error naming the problem`, async () => {
      const res = await postJson(body);
      expect(res.status).toBe(status);
      expect(res.json["code"]).toBe("invalid_argument");
      expect(String(res.json["message"])).toContain(message);
    });
  }

  it("counts bad requests in the error stats and keeps serving", async () => {
    await postJson("{nope");
    const stats = await (
      await fetch(`http://${t.addresses.debug}/stats`)
    ).text();
    const line = stats
      .split("\n")
      .find((l) =>
        l.startsWith("ratelimit.service.call.should_rate_limit.service_error:"),
      );
    expect(Number(line?.split(": ")[1])).toBeGreaterThan(0);
    const ok = await postJson(
      '{"domain":"rl","descriptors":[{"entries":[{"key":"category","value":"account"}]}]}',
    );
    expect(ok.status).toBe(200);
  });
});

describe("/healthcheck and debug", () => {
  it("answers 200 OK when healthy", async () => {
    const res = await fetch(`http://${t.addresses.http}/healthcheck`);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("OK");
  });

  it("dumps the loaded config on /rlconfig and lists paths on /", async () => {
    const dump = await (
      await fetch(`http://${t.addresses.debug}/rlconfig`)
    ).text();
    expect(dump).toContain(
      "rl.foo.bar_bkthomps: unit=MINUTE requests_per_unit=1, shadow_mode: false, quota_mode: false\n",
    );
    expect(dump).toContain(
      "rl.foo.bay: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, quota_mode: false\n",
    );
    const index = await (await fetch(`http://${t.addresses.debug}/`)).text();
    expect(index).toContain("/rlconfig:");
    expect(index).toContain("/stats:");
  });
});

describe("hot reload", () => {
  async function reloadRemaining(): Promise<number | undefined> {
    const res = await postJson(
      '{"domain":"rl","descriptors":[{"entries":[{"key":"reload","value":"r"}]}],"hitsAddend":0}',
    );
    const s = (
      res.json["statuses"] as Record<string, unknown>[] | undefined
    )?.[0];
    return (s?.["currentLimit"] as { requestsPerUnit?: number } | undefined)
      ?.requestsPerUnit;
  }

  it("applies an edited limit without a restart, and keeps the old limits on a broken edit", async () => {
    expect(await reloadRemaining()).toBe(1);
    await t.writeConfig(
      "rl.yaml",
      config.replace(
        "rate_limit: { unit: minute, requests_per_unit: 1 }\n",
        "rate_limit: { unit: minute, requests_per_unit: 50 }\n",
      ),
    );
    await waitFor(
      async () => (await reloadRemaining()) === 50,
      "the edited limit to apply",
    );
    const errorsBefore = t.app.statsManager.service.configLoadError.value();
    await t.writeConfig(
      "rl.yaml",
      config.replace("unit: minute", "unit: fortnight"),
    );
    await waitFor(
      () => t.app.statsManager.service.configLoadError.value() > errorsBefore,
      "the broken edit to be rejected",
    );
    expect(await reloadRemaining()).toBe(50);
  });
});

describe("RESPONSE_DYNAMIC_METADATA", () => {
  it("adds dynamic metadata with the passed descriptors' config metadata to /json answers", async () => {
    const app = await startTestApp(
      {
        "md.yaml": `
domain: md
descriptors:
  - key: team
    value: a
    metadata: { owner: alice, tier: { level: 1 } }
    rate_limit: { unit: minute, requests_per_unit: 5 }
`,
      },
      { RESPONSE_DYNAMIC_METADATA: "true" },
    );
    try {
      const res = await fetch(`http://${app.addresses.http}/json`, {
        method: "POST",
        body: '{"domain":"md","descriptors":[{"entries":[{"key":"team","value":"a"}]}]}',
      });
      const json = (await res.json()) as Record<string, unknown>;
      expect(json["dynamicMetadata"]).toEqual({
        descriptors: [{ entries: ["team=a"] }],
        domain: "md",
        metadata: { owner: "alice", tier: { level: 1 } },
      });
    } finally {
      await app.stop();
    }
  });
});
