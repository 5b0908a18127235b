import { describe, expect, it } from "vitest";
import { createMogrify } from "../../../src/stats/mogrifiers.js";

describe("createMogrify", () => {
  const mogrify = createMogrify([
    {
      name: "ratelimit",
      pattern: String.raw`^ratelimit\.service\.rate_limit\.([^.]+)\.(.+)\.([^.]+)$`,
      metricName: "ratelimit.service.rate_limit.$3",
      tags: { domain: "$1", descriptor: "$2", missing: "$7" },
    },
    {
      name: "server",
      pattern: String.raw`^ratelimit_server\.(.+)\.(.+)$`,
      metricName: "ratelimit_server.$2",
      tags: { method: "$1", whole: "$0" },
    },
  ]);

  it("applies the first matching rule after splitting tags off", () => {
    expect(
      mogrify("ratelimit.service.rate_limit.d.k_v.over_limit.__env=prod"),
    ).toEqual({
      name: "ratelimit.service.rate_limit.over_limit",
      tags: ["env:prod", "domain:d", "descriptor:k_v", "missing:$7"],
    });
    expect(mogrify("ratelimit_server.ShouldRateLimit.total_requests")).toEqual({
      name: "ratelimit_server.total_requests",
      tags: [
        "method:ShouldRateLimit",
        "whole:ratelimit_server.ShouldRateLimit.total_requests",
      ],
    });
  });

  it("keeps names no rule matches", () => {
    expect(mogrify("ratelimit.service.config_load_success.__a=b")).toEqual({
      name: "ratelimit.service.config_load_success",
      tags: ["a:b"],
    });
  });
});
