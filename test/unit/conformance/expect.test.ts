import { describe, expect, it } from "vitest";
import {
  differences,
  secondsToWindowEnd,
} from "../../../src/conformance/expect.js";
import type {
  AnswerView,
  CallOutcome,
} from "../../../src/conformance/model.js";

// 2026-12-02 15:40:10 UTC: 10 s into a minute, 2410 s into an hour.
const at = Date.UTC(2026, 11, 2, 15, 40, 10, 250);
const times = { sentMs: at, answeredMs: at + 20 };

function answer(partial: Partial<AnswerView> = {}): CallOutcome {
  return {
    kind: "answer",
    answer: {
      overallCode: "OK",
      statuses: [
        {
          code: "OK",
          currentLimit: { requestsPerUnit: 5, unit: "MINUTE" },
          limitRemaining: 4,
          durationUntilReset: 50,
        },
      ],
      headers: [],
      ...partial,
    },
  };
}

describe("secondsToWindowEnd", () => {
  it("counts to the end of the epoch-aligned window, never 0", () => {
    expect(secondsToWindowEnd("SECOND", at)).toBe(1);
    expect(secondsToWindowEnd("MINUTE", at)).toBe(50);
    expect(secondsToWindowEnd("HOUR", at)).toBe(3600 - 2410);
    expect(secondsToWindowEnd("DAY", at)).toBe(86_400 - (15 * 3600 + 2410));
    expect(secondsToWindowEnd("MINUTE", Date.UTC(2026, 0, 1, 0, 0, 0))).toBe(
      60,
    );
  });
});

describe("differences", () => {
  it("finds none when the answer matches", () => {
    expect(
      differences(
        {
          overall: "OK",
          statuses: [
            {
              code: "OK",
              remaining: 4,
              limit: { requestsPerUnit: 5, unit: "MINUTE" },
              reset: "MINUTE",
            },
          ],
        },
        answer(),
        times,
      ),
    ).toEqual([]);
  });

  it("names each field that differs", () => {
    expect(
      differences(
        {
          overall: "OVER_LIMIT",
          statuses: [
            {
              code: "OVER_LIMIT",
              remaining: 0,
              limit: { requestsPerUnit: 6, unit: "HOUR" },
            },
          ],
        },
        answer(),
        times,
      ),
    ).toEqual([
      "overallCode is OK, expected OVER_LIMIT",
      "statuses[0].code is OK, expected OVER_LIMIT",
      "statuses[0].currentLimit is 5/MINUTE, expected 6/HOUR",
      "statuses[0].limitRemaining is 4, expected 0",
    ]);
  });

  it("allows a second either way around the window's end, and no more", () => {
    const reset = (n: number): string[] =>
      differences(
        { statuses: [{ reset: "MINUTE" }] },
        answer({
          statuses: [
            {
              code: "OK",
              currentLimit: null,
              limitRemaining: 0,
              durationUntilReset: n,
            },
          ],
        }),
        times,
      );
    expect(reset(49)).toEqual([]);
    expect(reset(51)).toEqual([]);
    expect(reset(52)).toHaveLength(1);
    expect(reset(0)).toHaveLength(1);
  });

  it("accepts any value the window showed during a slow call, and both sides of a boundary", () => {
    const status = (n: number) => ({
      code: "OK" as const,
      currentLimit: null,
      limitRemaining: 0,
      durationUntilReset: n,
    });
    // Sent 10 s into the minute (50 left), answered 4 s later (46 left).
    const slow = { sentMs: at, answeredMs: at + 4_000 };
    const reset = (n: number, when = slow): string[] =>
      differences(
        { statuses: [{ reset: "MINUTE" }] },
        answer({ statuses: [status(n)] }),
        when,
      );
    expect(reset(48)).toEqual([]);
    expect(reset(45)).toEqual([]);
    expect(reset(44)).toHaveLength(1);
    // Sent in the last second of a minute, answered in the next one.
    const end = Date.UTC(2026, 11, 2, 15, 40, 59, 900);
    const across = { sentMs: end, answeredMs: end + 200 };
    expect(reset(1, across)).toEqual([]);
    expect(reset(60, across)).toEqual([]);
    expect(reset(30, across)).toHaveLength(1);
  });

  it("expects no limit, a missing status count and absent headers", () => {
    expect(
      differences(
        { statuses: [{ limit: null }, { code: "OK" }], noHeaders: true },
        answer({ headers: [{ key: "RateLimit-Limit", value: "5" }] }),
        times,
      ),
    ).toEqual([
      "1 statuses, expected 2 (one per descriptor)",
      "statuses[0].currentLimit is 5/MINUTE, expected none",
      "responseHeadersToAdd has RateLimit-Limit, expected none",
    ]);
  });

  it("checks headers by name in any case, and the reset header by the window", () => {
    const outcome = answer({
      headers: [
        { key: "ratelimit-limit", value: "5" },
        { key: "RateLimit-Reset", value: "50" },
      ],
    });
    expect(
      differences(
        {
          headers: {
            "RateLimit-Limit": "5",
            "RateLimit-Reset": "reset:MINUTE",
          },
        },
        outcome,
        times,
      ),
    ).toEqual([]);
    expect(
      differences({ headers: { "RateLimit-Remaining": "4" } }, outcome, times),
    ).toEqual(["header RateLimit-Remaining is missing"]);
  });

  it("treats an error as a failure unless one is expected", () => {
    const error: CallOutcome = { kind: "error", error: "gRPC 14: down" };
    expect(differences({ overall: "OK" }, error, times)).toEqual([
      "the call failed: gRPC 14: down",
    ]);
    expect(differences({ error: true }, error, times)).toEqual([]);
    expect(differences({ error: true }, answer(), times)).toEqual([
      "the call answered, expected it to fail",
    ]);
  });

  it("compares the HTTP status of /json answers", () => {
    expect(
      differences({ httpStatus: 429 }, answer({ httpStatus: 200 }), times),
    ).toEqual(["HTTP status is 200, expected 429"]);
  });
});
