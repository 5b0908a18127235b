import { afterAll, describe, expect, it } from "vitest";
import {
  attackNamed,
  markdownTable,
  resultNotes,
  runAttack,
  slowestCloseMs,
  spawnAttackTarget,
  type AttackResult,
} from "../helpers/h2-attacks.js";
import { repoRoot } from "../helpers/spawn-service.js";

// Raw HTTP/2 attacks on the gRPC port of the built service (dist/src/main.js, one fresh process
// per attack), on both engines, with a legitimate client making 100 ShouldRateLimit calls/s on
// its own connection meanwhile. Each attack must leave the process running and answering, fail
// none of the legitimate calls, and grow the RSS by less than 150 MiB; the attacks that the
// abuse limits of src/http2/limits.ts end must see their connection closed by the server
// within 5 s of opening it. Latency is not asserted (bench/h2-attacks.ts reports it).

/** RSS growth allowed during one attack, in MiB. */
const rssBoundMiB = 150;
/** Time from opening an attacking connection to the server closing it, in ms. */
const closeBoundMs = 5000;

interface Case {
  readonly attack: string;
  /**
   * Whether the abuse limits end the attack by closing its connection(s); "builtin": only on
   * the built-in engine (a known issue of the node engine, docs/security.md).
   */
  readonly closed: boolean | "builtin";
  /**
   * RSS growth bound in MiB when not the default; `null`: not asserted on that engine (a known
   * issue, docs/security.md).
   */
  readonly rssBoundMiB?: {
    readonly builtin?: number;
    readonly node?: number | null;
  };
  /** Longest run, in ms; it ends 1.5 s in once the server closed a connection. */
  readonly durationMs: number;
  readonly env?: Record<string, string>;
}

const cases: readonly Case[] = [
  // A malformed request adds 10 to the flood score: ~100 quickly end the connection. On the
  // node engine each malformed stream still passes through node's compat layer before it is
  // refused, and V8 collects the attack's connections late: +155 MiB measured in CI.
  {
    attack: "bad-header",
    closed: true,
    durationMs: 6000,
    rssBoundMiB: { node: 250 },
  },
  // At most 8 CONTINUATION frames per header block.
  { attack: "continuation-flood/empty", closed: true, durationMs: 6000 },
  { attack: "continuation-flood/small", closed: true, durationMs: 6000 },
  // Handshake timeout 1 s (the server's SETTINGS must be ACKed within it too), idle 2 s:
  // every one of the 2,000 connections is closed, the attack ends when the last one is.
  {
    attack: "idle",
    closed: true,
    durationMs: 7000,
    env: { GRPC_HANDSHAKE_TIMEOUT: "1s", GRPC_MAX_CONNECTION_IDLE: "2s" },
  },
  // The flood score (1,000, −100/s) or, for PING, the keepalive strikes.
  { attack: "control-flood/ping", closed: true, durationMs: 6000 },
  { attack: "control-flood/settings", closed: true, durationMs: 6000 },
  { attack: "control-flood/empty-data", closed: true, durationMs: 6000 },
  // node:http2 offers no hook for WINDOW_UPDATE frames: not ended on the node engine.
  {
    attack: "control-flood/window-update",
    closed: "builtin",
    durationMs: 6000,
  },
  { attack: "control-flood/priority", closed: true, durationMs: 6000 },
  // On the node engine each open stream is a router call holding node's stream, the compat
  // req/res and Connect's handler context (~11 KiB); the attack's connections come one after
  // another, and V8 collects the old ones late: +110-165 MiB measured (docs/security.md).
  {
    attack: "control-flood/refused-streams",
    closed: true,
    durationMs: 6000,
    rssBoundMiB: { node: 250 },
  },
  // 1,000 resets at once, 1,000/s after. On the node engine every reset stream has been through
  // node's compat layer and the router first (as with refused-streams), and V8 collects the
  // attack's connections late: +104-126 MiB measured here, +155 MiB in CI.
  {
    attack: "rapid-reset",
    closed: true,
    durationMs: 6000,
    rssBoundMiB: { node: 250 },
  },
  // 16 MiB of header lists and bodies per connection, header lists 4 MiB of it. What stays
  // held is at most 4 × 4 MiB, but decoding ~500 MB/s of header lists (what the attacker sends
  // on this machine) grows V8's old generation: measured +230-245 MiB, the same after 5 s and
  // 20 s (bounded). On the node engine RSS kept growing (+700 MiB at 5 s, +980 MiB at 20 s):
  // a known issue, not asserted there.
  {
    attack: "header-memory",
    closed: true,
    durationMs: 6000,
    rssBoundMiB: { builtin: 300, node: null },
  },
  // The client closes these connections itself: survival and the legitimate calls only.
  { attack: "grpc-timeout-goaway", closed: false, durationMs: 3000 },
];

const results: AttackResult[] = [];

afterAll(() => {
  // The measurements, for whoever reads the test output (nothing here is asserted on latency).
  console.log(`${markdownTable(results)}\n${resultNotes(results)}`);
});

describe.each(["builtin", "node"])(
  "the %s engine under HTTP/2 attacks",
  (engine) => {
    it.each(cases)(
      "survives $attack",
      async ({ attack, closed, durationMs, env, rssBoundMiB: bounds }) => {
        const target = await spawnAttackTarget({
          repo: repoRoot,
          engine,
          ...(env !== undefined ? { env } : {}),
        });
        let r: AttackResult;
        try {
          r = await runAttack(target, attackNamed(attack), {
            engine,
            durationMs,
            minDurationMs: 1500,
          });
        } finally {
          await target.stop();
        }
        results.push(r);
        const summary = `${attack} (${engine}): ${JSON.stringify({
          probe: r.probe,
          exit: r.exit,
          legit: r.legit,
          rssGrowthMiB: r.rssGrowthMiB,
          closed: `${r.connectionsClosedByServer}/${r.connectionsOpened}`,
          openAtEnd: r.connectionsOpenAtEnd,
          slowestCloseMs: slowestCloseMs(r),
          goaways: r.goaways,
          notes: r.notes,
        })}`;
        expect.soft(r.alive, summary).toBe(true);
        expect.soft(r.probe, summary).toBe("ok");
        expect.soft(r.legit.errors, summary).toBe(0);
        expect.soft(r.legit.ok, summary).toBeGreaterThan(0);
        const bound = engine === "node" ? bounds?.node : bounds?.builtin;
        if (bound !== null)
          expect
            .soft(r.rssGrowthMiB ?? 0, summary)
            .toBeLessThan(bound ?? rssBoundMiB);
        if (closed === true || (closed === "builtin" && engine === "builtin")) {
          expect.soft(r.connectionsClosedByServer, summary).toBeGreaterThan(0);
          expect
            .soft(slowestCloseMs(r) ?? Infinity, summary)
            .toBeLessThanOrEqual(closeBoundMs);
          if (attack === "idle")
            expect.soft(r.connectionsOpenAtEnd, summary).toBe(0);
        }
      },
      60_000,
    );
  },
);
