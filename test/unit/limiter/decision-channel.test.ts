import { describe, expect, it } from "vitest";
import {
  createDecisionChannel,
  type DecisionFailure,
} from "../../../src/limiter/decision-channel.js";
import type { Decision } from "../../../src/limiter/decision.js";
import { limitRequest } from "../../helpers/limit-request.js";
import { testDecision } from "../../helpers/decisions.js";

const failure: DecisionFailure = {
  request: limitRequest("d", [], [], []),
  error: new Error("store down"),
  times: undefined,
};

describe("createDecisionChannel", () => {
  it("publishes each decision to every subscriber until it unsubscribes", () => {
    const decisions = createDecisionChannel();
    expect(decisions.hasSubscribers).toBe(false);
    const seen: Decision[] = [];
    const unsubscribe = decisions.subscribe((d) => seen.push(d));
    expect(decisions.hasSubscribers).toBe(true);
    const decision = testDecision([], []);
    decisions.publish(decision);
    unsubscribe();
    unsubscribe();
    decisions.publish(decision);
    expect(seen).toEqual([decision]);
    expect(decisions.hasSubscribers).toBe(false);
  });

  it("asks for the store's times only while a subscriber wants them", () => {
    const decisions = createDecisionChannel();
    const plain = decisions.subscribe(() => undefined);
    expect(decisions.timed).toBe(false);
    const timed = decisions.subscribe(() => undefined, { times: true });
    const other = decisions.subscribe(() => undefined, { times: true });
    expect(decisions.timed).toBe(true);
    timed();
    timed();
    expect(decisions.timed).toBe(true);
    other();
    expect(decisions.timed).toBe(false);
    plain();
  });

  it("tells failures to the subscribers that listen for them only", () => {
    const decisions = createDecisionChannel();
    const failures: DecisionFailure[] = [];
    const decided: Decision[] = [];
    decisions.subscribe((d) => decided.push(d));
    const unsubscribe = decisions.subscribe(() => undefined, {
      onFailure: (f) => failures.push(f),
    });
    decisions.publishFailure(failure);
    unsubscribe();
    decisions.publishFailure(failure);
    expect(failures).toEqual([failure]);
    expect(decided).toEqual([]);
  });
});
