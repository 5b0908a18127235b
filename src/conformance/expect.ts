// Compares an answer with what a step expects. A difference is a list of plain sentences,
// reported with the request, the expected and the actual answer.
import type {
  AnswerView,
  CallOutcome,
  Expectation,
  StatusExpectation,
  StatusView,
  UnitName,
} from "./model.js";

/** Seconds of each unit's epoch-aligned window (spec: second, minute, hour, day). */
export const unitSeconds: Readonly<Record<UnitName, number>> = {
  UNKNOWN: 0,
  SECOND: 1,
  MINUTE: 60,
  HOUR: 3_600,
  DAY: 86_400,
  // Beyond the spec's four units: the reference's epoch-aligned blocks (docs/reference-parity.md#windows).
  WEEK: 604_800,
  MONTH: 2_592_000,
  YEAR: 31_536_000,
};

/**
 * Seconds until the end of the epoch-aligned window of `unit` that holds `nowMs`: in
 * [1, window length], never 0.
 */
export function secondsToWindowEnd(unit: UnitName, nowMs: number): number {
  const length = unitSeconds[unit];
  const now = Math.floor(nowMs / 1000);
  return length - (now % length);
}

/** The instant (ms) a call was sent and the one its answer came back. */
export interface CallTimes {
  readonly sentMs: number;
  readonly answeredMs: number;
}

function checkReset(
  where: string,
  expected: StatusExpectation["reset"],
  actual: number | null,
  times: CallTimes,
): string[] {
  if (expected === undefined) return [];
  if (expected === null)
    return actual === null
      ? []
      : [`${where}durationUntilReset is ${actual}, expected none`];
  if (actual === null) return [`${where}durationUntilReset is missing`];
  if (typeof expected === "object")
    return actual >= expected.min && actual <= expected.max
      ? []
      : [
          `${where}durationUntilReset is ${actual}, expected ${expected.min}..${expected.max}`,
        ];
  const length = unitSeconds[expected];
  // The server read its clock somewhere between sending and answering: accept what the window
  // showed at any instant in between, with a second of rounding either way.
  const early = secondsToWindowEnd(expected, times.sentMs);
  const late = secondsToWindowEnd(expected, times.answeredMs);
  const within = (lo: number, hi: number): boolean =>
    actual >= Math.max(1, lo) && actual <= Math.min(length, hi);
  const ok =
    early >= late
      ? within(late - 1, early + 1)
      : // A window ended during the call: the old window's tail or the new one's start.
        within(1, early + 1) || within(late - 1, length);
  // Within a second of a boundary the server's clock may already (or still) be on the other
  // side: the new window's full length, or the old one's last second.
  const nearEnd = Math.min(early, late) <= 1 && actual >= length - 1;
  const nearStart = Math.max(early, late) >= length && actual <= 2;
  if (ok || nearEnd || nearStart) return [];
  return [
    `${where}durationUntilReset is ${actual}, expected ${late} (the ${expected} window's end by the suite's clock, ±1 s)`,
  ];
}

function checkStatus(
  index: number,
  expected: StatusExpectation,
  actual: StatusView,
  times: CallTimes,
): string[] {
  const where = `statuses[${index}].`;
  const problems: string[] = [];
  if (expected.code !== undefined && actual.code !== expected.code)
    problems.push(`${where}code is ${actual.code}, expected ${expected.code}`);
  if (expected.limit !== undefined) {
    const a = actual.currentLimit;
    if (expected.limit === null) {
      if (a !== null)
        problems.push(
          `${where}currentLimit is ${a.requestsPerUnit}/${a.unit}, expected none`,
        );
    } else if (a === null) {
      problems.push(
        `${where}currentLimit is missing, expected ${expected.limit.requestsPerUnit}/${expected.limit.unit}`,
      );
    } else if (
      a.requestsPerUnit !== expected.limit.requestsPerUnit ||
      a.unit !== expected.limit.unit
    ) {
      problems.push(
        `${where}currentLimit is ${a.requestsPerUnit}/${a.unit}, expected ${expected.limit.requestsPerUnit}/${expected.limit.unit}`,
      );
    }
  }
  if (
    expected.remaining !== undefined &&
    actual.limitRemaining !== expected.remaining
  )
    problems.push(
      `${where}limitRemaining is ${actual.limitRemaining}, expected ${expected.remaining}`,
    );
  problems.push(
    ...checkReset(where, expected.reset, actual.durationUntilReset, times),
  );
  return problems;
}

function checkHeaders(
  expected: Expectation,
  answer: AnswerView,
  times: CallTimes,
): string[] {
  const problems: string[] = [];
  if (expected.noHeaders === true && answer.headers.length > 0)
    problems.push(
      `responseHeadersToAdd has ${answer.headers.map((h) => h.key).join(", ")}, expected none`,
    );
  for (const [name, value] of Object.entries(expected.headers ?? {})) {
    const found = answer.headers.find(
      (h) => h.key.toLowerCase() === name.toLowerCase(),
    );
    if (found === undefined) {
      problems.push(`header ${name} is missing`);
      continue;
    }
    if (value.startsWith("reset:")) {
      const unit = value.slice("reset:".length) as UnitName;
      const seconds = Number(found.value);
      const p = checkReset(
        `header ${name}: `,
        unit,
        Number.isInteger(seconds) ? seconds : -1,
        times,
      );
      problems.push(...p);
    } else if (found.value !== value) {
      problems.push(`header ${name} is ${found.value}, expected ${value}`);
    }
  }
  return problems;
}

/**
 * Lists how `outcome` differs from `expected` (empty when it matches).
 *
 * @param times - when the call was sent and answered, for window maths
 */
export function differences(
  expected: Expectation,
  outcome: CallOutcome,
  times: CallTimes,
): string[] {
  if (outcome.kind === "error") {
    if (expected.error === true) {
      if (
        expected.httpStatus !== undefined &&
        outcome.httpStatus !== expected.httpStatus
      )
        return [
          `HTTP status is ${outcome.httpStatus ?? "none"}, expected ${expected.httpStatus}`,
        ];
      return [];
    }
    return [`the call failed: ${outcome.error}`];
  }
  if (expected.error === true)
    return ["the call answered, expected it to fail"];
  const answer = outcome.answer;
  const problems: string[] = [];
  if (
    expected.httpStatus !== undefined &&
    answer.httpStatus !== expected.httpStatus
  )
    problems.push(
      `HTTP status is ${answer.httpStatus ?? "none"}, expected ${expected.httpStatus}`,
    );
  if (expected.overall !== undefined && answer.overallCode !== expected.overall)
    problems.push(
      `overallCode is ${answer.overallCode}, expected ${expected.overall}`,
    );
  if (expected.statuses !== undefined) {
    if (answer.statuses.length !== expected.statuses.length)
      problems.push(
        `${answer.statuses.length} statuses, expected ${expected.statuses.length} (one per descriptor)`,
      );
    expected.statuses.forEach((s, i) => {
      const a = answer.statuses[i];
      if (s !== undefined && a !== undefined)
        problems.push(...checkStatus(i, s, a, times));
    });
  }
  problems.push(...checkHeaders(expected, answer, times));
  return problems;
}
