// Prints the top self-time frames of a V8 CPU profile (`node --cpu-prof` writes one
// `.cpuprofile` per process) as a markdown table: function, url:line, self ms, share of all
// samples and share of the non-idle ones. Frames with the same function, url and line are summed
// (V8 keeps one node per call path). docs/performance.md "Round 4: profiles" shows its output.
//
//   node dist/bench/flame-summary.js PROFILE.cpuprofile [ROWS]   (ROWS: 15 by default)
import { readFileSync } from "node:fs";
import { basename } from "node:path";

/** The parts of a `.cpuprofile` (Chrome DevTools Profiler.Profile) this script reads. */
interface CpuProfile {
  readonly nodes: readonly {
    readonly id: number;
    readonly callFrame: {
      readonly functionName: string;
      readonly url: string;
      /** 0-based. */
      readonly lineNumber: number;
    };
  }[];
  /** Node id per sample. */
  readonly samples: readonly number[];
  /** µs before each sample (the first from startTime). */
  readonly timeDeltas: readonly number[];
}

/** One summed frame. */
interface FrameTotal {
  readonly name: string;
  readonly where: string;
  selfUs: number;
  samples: number;
}

/**
 * Sums self time per frame (function, url, line); a sample's time is the delta to the next
 * sample, as DevTools counts it.
 *
 * @returns the frames, heaviest first, with the total and idle sample counts and µs.
 */
export function summarize(profile: CpuProfile): {
  readonly frames: FrameTotal[];
  readonly totalUs: number;
  readonly idleUs: number;
  readonly totalSamples: number;
  readonly idleSamples: number;
} {
  const byId = new Map<number, FrameTotal>();
  const byFrame = new Map<string, FrameTotal>();
  for (const node of profile.nodes) {
    const { functionName, url, lineNumber } = node.callFrame;
    const name = functionName === "" ? "(anonymous)" : functionName;
    const where =
      url === "" ? "" : `${shortUrl(url)}:${String(lineNumber + 1)}`;
    const key = `${name}\u0000${where}`;
    let total = byFrame.get(key);
    if (total === undefined) {
      total = { name, where, selfUs: 0, samples: 0 };
      byFrame.set(key, total);
    }
    byId.set(node.id, total);
  }
  let totalUs = 0;
  let idleUs = 0;
  let idleSamples = 0;
  const { samples, timeDeltas } = profile;
  for (let i = 0; i < samples.length; i++) {
    const frame = byId.get(samples[i] ?? -1);
    if (frame === undefined) continue;
    // The time a sample stands for is the gap to the next one (the last: its own delta).
    const us = Math.max(0, timeDeltas[i + 1] ?? timeDeltas[i] ?? 0);
    frame.selfUs += us;
    frame.samples += 1;
    totalUs += us;
    if (frame.name === "(idle)") {
      idleUs += us;
      idleSamples += 1;
    }
  }
  const frames = [...byFrame.values()]
    .filter((f) => f.samples > 0)
    .sort((a, b) => b.selfUs - a.selfUs);
  return { frames, totalUs, idleUs, totalSamples: samples.length, idleSamples };
}

/** `file:///…/dist/bundle/main.js` → `main.js`; `node:internal/…` kept as is. */
function shortUrl(url: string): string {
  if (url.startsWith("node:")) return url;
  return basename(url);
}

/** Renders the summary as a markdown table of the `rows` heaviest frames. */
export function markdownTable(
  summary: ReturnType<typeof summarize>,
  rows: number,
): string {
  const busyUs = summary.totalUs - summary.idleUs;
  const pct = (part: number, whole: number): string =>
    whole > 0 ? ((100 * part) / whole).toFixed(1) : "–";
  const lines = [
    `Samples: ${String(summary.totalSamples)}, ${(summary.totalUs / 1000).toFixed(0)} ms; ` +
      `non-idle ${(busyUs / 1000).toFixed(0)} ms (${pct(busyUs, summary.totalUs)} %).`,
    "",
    "| # | function | url:line | self ms | % samples | % non-idle |",
    "|---|---|---|---|---|---|",
  ];
  summary.frames.slice(0, rows).forEach((f, i) => {
    const idle = f.name === "(idle)";
    lines.push(
      `| ${String(i + 1)} | \`${f.name}\` | ${f.where === "" ? "–" : `\`${f.where}\``} | ` +
        `${(f.selfUs / 1000).toFixed(1)} | ${pct(f.selfUs, summary.totalUs)} | ` +
        `${idle ? "–" : pct(f.selfUs, busyUs)} |`,
    );
  });
  return lines.join("\n");
}

const [file, rowsArg] = process.argv.slice(2);
if (file === undefined) {
  process.stderr.write(
    "usage: node dist/bench/flame-summary.js PROFILE.cpuprofile [ROWS]\n",
  );
  process.exit(2);
}
const rows = rowsArg === undefined ? 15 : Number(rowsArg);
if (!Number.isInteger(rows) || rows < 1)
  throw new Error(`ROWS must be a positive integer, got "${String(rowsArg)}"`);
const profile = JSON.parse(readFileSync(file, "utf8")) as CpuProfile;
process.stdout.write(`${markdownTable(summarize(profile), rows)}\n`);
