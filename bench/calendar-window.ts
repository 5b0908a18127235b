// Micro-bench of calendar windows (src/limiter/calendar-window.ts), not part of `make bench`:
// nanoseconds per `period()` call when the answer is the cached period (every decision but the
// first of each period), when the clock has just moved into the next period, and at random
// instants (every call recomputes). Run after `make build`:
//   node dist/bench/calendar-window.js
// Numbers are for comparison on one machine; the machine is shared.
import { CalendarWindow } from "../src/config/calendar-window.js";

const calls = Number(process.env["BENCH_CALENDAR_CALLS"] ?? "5000000");

/** Runs `body(i)` for i in [0, n) and returns nanoseconds per call (best of three rounds). */
function measure(n: number, body: (i: number) => number): number {
  let best = Infinity;
  let sink = 0;
  for (let round = 0; round < 3; round++) {
    const started = process.hrtime.bigint();
    for (let i = 0; i < n; i++) sink += body(i);
    const elapsed = Number(process.hrtime.bigint() - started);
    best = Math.min(best, elapsed / n);
  }
  if (sink === 0.5) console.log(sink); // keeps the results alive
  return best;
}

const rows: string[][] = [["zone", "unit", "cached", "next period", "random"]];
const start2026 = Date.UTC(2026, 0, 1) / 1000;
const end2100 = Date.UTC(2100, 0, 1) / 1000;
for (const [zone, unit] of [
  ["UTC", "day"],
  ["Europe/Berlin", "day"],
  ["Europe/Berlin", "month"],
  ["America/Sao_Paulo", "week"],
  ["Australia/Lord_Howe", "year"],
] as const) {
  const window = new CalendarWindow({ unit, timeZone: zone });
  // Inside one period: the clock moves by a second per call within the same hour.
  const base = window.period(start2026 + 43200).startSeconds + 3600;
  const cached = measure(
    calls,
    (i) => window.period(base + (i & 1023)).endSeconds,
  );
  // Moving forward: every call lands in the period after the previous one (few enough years
  // that the clock stays below the year 9998 in all three rounds).
  let now = start2026;
  const next = measure(unit === "year" ? 2000 : 20_000, () => {
    const period = window.period(now);
    now = period.endSeconds;
    return period.startSeconds;
  });
  // Anywhere in 1970–2100: every call recomputes.
  let seed = 1;
  const random = measure(20_000, () => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return window.period(Math.floor((seed / 2147483648) * end2100))
      .startSeconds;
  });
  rows.push([
    zone,
    unit,
    `${cached.toFixed(1)} ns`,
    `${(next / 1000).toFixed(1)} µs`,
    `${(random / 1000).toFixed(1)} µs`,
  ]);
}
const widths = rows[0]!.map((_, column) =>
  Math.max(...rows.map((row) => row[column]!.length)),
);
for (const row of rows)
  console.log(
    row.map((cell, column) => cell.padEnd(widths[column]!)).join("  "),
  );
