import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runConfigCheck } from "../../src/cli/config-check.js";
import {
  RateLimitRequestSchema,
  RateLimitResponse_Code as RlCode,
  RateLimitResponse_RateLimit_Unit as Unit,
  RateLimitService,
} from "../../src/proto.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";
import { request } from "../helpers/requests.js";

// The window extensions through the whole service over real gRPC. Windows of 3650 days keep a
// window edge out of the test's way.
const config = `domain: shop
charge: all_or_nothing
descriptors:
  - key: user
    rate_limit: { unit: day, unit_multiplier: 3650, requests_per_unit: 5 }
  - key: ip
    rate_limit: { unit: day, unit_multiplier: 3650, requests_per_unit: 2 }
  - key: token
    rate_limit:
      unit: day
      unit_multiplier: 3650
      algorithm: sliding_window
      requests_per_unit: 3
`;

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ "shop.yaml": config });
});
afterAll(async () => {
  await t.stop();
});

describe("window extensions over gRPC", () => {
  it("charges all-or-nothing: a request refused by one limit leaves the other's budget", async () => {
    const client = createClient(
      RateLimitService,
      createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
    );
    const codes: RlCode[] = [];
    for (let i = 0; i < 4; i++) {
      const r = await client.shouldRateLimit(
        request("shop", [["user", "alice"]], [["ip", "10.0.0.1"]]),
      );
      codes.push(r.overallCode);
    }
    expect(codes).toEqual([
      RlCode.OK,
      RlCode.OK,
      RlCode.OVER_LIMIT,
      RlCode.OVER_LIMIT,
    ]);
    // Only the two admitted requests used alice's budget.
    const alone = await client.shouldRateLimit(
      request("shop", [["user", "alice"]]),
    );
    expect(alone.overallCode).toBe(RlCode.OK);
    expect(alone.statuses[0]!.limitRemaining).toBe(2);
    // The reported unit stays the enum; the reset carries the real (3650-day) window.
    expect(alone.statuses[0]!.currentLimit?.unit).toBe(Unit.DAY);
    expect(
      Number(alone.statuses[0]!.durationUntilReset?.seconds),
    ).toBeGreaterThan(86400);
  });

  it("counts a sliding window", async () => {
    const client = createClient(
      RateLimitService,
      createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
    );
    const remaining: number[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await client.shouldRateLimit(
        request("shop", [["token", "t1"]]),
      );
      expect(r.overallCode).toBe(RlCode.OK);
      remaining.push(r.statuses[0]!.limitRemaining);
    }
    expect(remaining).toEqual([2, 1, 0]);
    const over = await client.shouldRateLimit(
      request("shop", [["token", "t1"]]),
    );
    expect(over.overallCode).toBe(RlCode.OVER_LIMIT);
  });

  it("dumps the extension fields on /rlconfig", async () => {
    const dump = await (
      await fetch(`http://${t.addresses.debug}/rlconfig`)
    ).text();
    expect(dump).toContain(
      "shop.user: unit=DAY requests_per_unit=5, shadow_mode: false, quota_mode: false, unit_multiplier: 3650, charge: all_or_nothing\n",
    );
    expect(dump).toContain(
      "shop.token: unit=DAY requests_per_unit=3, shadow_mode: false, quota_mode: false, unit_multiplier: 3650, algorithm: sliding_window, charge: all_or_nothing\n",
    );
  });
});

describe("ratelimit-config-check with the extension fields", () => {
  it("accepts them and names file and line of a bad one", async () => {
    const dir = await mkdtemp(join(tmpdir(), "rls-windows-check-"));
    try {
      await writeFile(join(dir, "shop.yaml"), config);
      const lines: string[] = [];
      expect(runConfigCheck(["-config_dir", dir], (l) => lines.push(l))).toBe(
        0,
      );
      expect(lines.at(-1)).toBe("all rate limit configs ok");
      await writeFile(
        join(dir, "bad.yaml"),
        "domain: bad\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      unit_multiplier: 0\n      requests_per_unit: 1\n",
      );
      lines.length = 0;
      expect(runConfigCheck(["-config_dir", dir], (l) => lines.push(l))).toBe(
        1,
      );
      expect(lines.at(-1)).toBe(
        `error loading rate limit configs: ${join(dir, "bad.yaml")}: config error, line 6: invalid unit_multiplier '0' (expected an integer >= 1); field descriptors[0].rate_limit.unit_multiplier`,
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("CHARGE_MODE=all_or_nothing", () => {
  it("charges all-or-nothing in domains without charge:, and charge: each overrides it", async () => {
    const rule =
      "  - key: user\n    rate_limit: { unit: day, unit_multiplier: 3650, requests_per_unit: 5 }\n  - key: ip\n    rate_limit: { unit: day, unit_multiplier: 3650, requests_per_unit: 1 }\n";
    const app = await startTestApp(
      {
        "global.yaml": `domain: global\ndescriptors:\n${rule}`,
        "each.yaml": `domain: each\ncharge: each\ndescriptors:\n${rule}`,
      },
      { CHARGE_MODE: "all_or_nothing" },
    );
    try {
      const client = createClient(
        RateLimitService,
        createGrpcTransport({ baseUrl: `http://${app.addresses.grpc}` }),
      );
      const remainingAfterTwo = async (domain: string): Promise<number> => {
        for (let i = 0; i < 2; i++) {
          await client.shouldRateLimit(
            create(RateLimitRequestSchema, {
              domain,
              descriptors: [
                { entries: [{ key: "user", value: "u" }] },
                { entries: [{ key: "ip", value: "i" }] },
              ],
            }),
          );
        }
        const r = await client.shouldRateLimit(
          create(RateLimitRequestSchema, {
            domain,
            descriptors: [{ entries: [{ key: "user", value: "u" }] }],
          }),
        );
        return r.statuses[0]!.limitRemaining;
      };
      // The second request is over the ip limit: all-or-nothing leaves user at 1 (+1 now).
      expect(await remainingAfterTwo("global")).toBe(3);
      // charge: each counts the refused request too.
      expect(await remainingAfterTwo("each")).toBe(2);
    } finally {
      await app.stop();
    }
  });
});
