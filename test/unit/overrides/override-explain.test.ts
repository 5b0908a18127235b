import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { loadConfig } from "../../../src/config/load-config.js";
import { explainLimit } from "../../../src/explain/descriptor-explanation.js";
import { explainConfig } from "../../../src/explain/explain-message.js";
import {
  OverrideLimitSchema,
  RateLimitResponse_RateLimit_Unit as Unit,
} from "../../../src/proto.js";
import { OverrideTable } from "../../../src/overrides/override-table.js";
import { createStatsManager } from "../../../src/stats/stats-manager.js";
import { FakeClock } from "../../helpers/fake-clock.js";
import { request } from "../../helpers/requests.js";

const yaml = `
domain: api
descriptors:
  - key: tenant
    rate_limit: { unit: minute, requests_per_unit: 10 }
`;

describe("Explain with run-time overrides", () => {
  const config = loadConfig([{ name: "config.yaml", text: yaml }], {
    statsManager: createStatsManager(),
  });
  const clock = new FakeClock(1_800_000_000);
  const table = new OverrideTable({ clock });
  table.put({
    domain: "api",
    entries: [{ key: "tenant", value: "ac*" }],
    limit: create(OverrideLimitSchema, {
      requestsPerUnit: 500,
      unit: Unit.HOUR,
      unitMultiplier: 1,
      algorithm: "fixed_window",
    }),
    expireMs: clock.nowMs() + 60_000,
    reason: "launch week",
    actor: "alice",
    updateMs: clock.nowMs(),
  });
  const explained = (value: string) =>
    explainConfig(
      (domain, descriptor) =>
        explainLimit(config.view!, domain, descriptor, table),
      request("api", [["tenant", value]]),
    );

  it("shows the override's limit, who set it, why and until when, beside the rule", () => {
    const { descriptors, limits } = explained("acme");
    const rule = descriptors[0]?.rule;
    expect(rule?.fullKey).toBe("api.tenant");
    expect(rule?.requestsPerUnit).toBe(500);
    expect(rule?.unit).toBe(Unit.HOUR);
    expect(rule?.runtimeOverride?.descriptor).toBe("tenant=ac*");
    expect(rule?.runtimeOverride?.actor).toBe("alice");
    expect(rule?.runtimeOverride?.reason).toBe("launch week");
    expect(rule?.runtimeOverride?.expireTime?.seconds).toBe(1_800_000_060n);
    expect(descriptors[0]?.notes.join("\n")).toContain(
      "run-time override tenant=ac* (set by alice, expires 2027-01-15T08:01:00.000Z, reason: launch week)",
    );
    // The limit counted is the override's (its window decides the counter read).
    expect(limits[0]?.windowSeconds).toBe(3600);
  });

  it("shows the rule alone where no override applies, or once it has expired", () => {
    expect(explained("beta").descriptors[0]?.rule?.runtimeOverride).toBe(
      undefined,
    );
    clock.seconds += 60;
    const rule = explained("acme").descriptors[0]?.rule;
    expect(rule?.runtimeOverride).toBeUndefined();
    expect(rule?.requestsPerUnit).toBe(10);
  });
});
