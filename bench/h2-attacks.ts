// HTTP/2 attacks on the gRPC port, measured: for each engine and each attack, a fresh service
// process (or one already running), the attack for a fixed time with a legitimate client
// beside it (100 ShouldRateLimit calls/s on its own connection), then a Markdown table. The
// attacks and measurements are test/helpers/h2-attacks.ts; bench/README.md explains the
// columns.
//
// Usage (after `tsc -p tsconfig.build.json`, which compiles this to dist/bench/h2-attacks.js):
//
//   node dist/bench/h2-attacks.js                          # both engines, every attack, 10 s each
//   node dist/bench/h2-attacks.js --repo /work/before      # the service built in another checkout
//   node dist/bench/h2-attacks.js --engines node --attacks rapid-reset,idle --duration 5
//   node dist/bench/h2-attacks.js --env GRPC_MAX_CONNECTION_IDLE=2s --env GRPC_HANDSHAKE_TIMEOUT=1s
//   node dist/bench/h2-attacks.js --port 8081 --pid 1234   # attach to a running service
//   node dist/bench/h2-attacks.js --list                   # the attacks
//
// Options:
//   --repo <dir>       repository whose dist/src/main.js is spawned (default: this one)
//   --engines <list>   GRPC_HTTP2_ENGINE values, comma-separated (default: builtin,node)
//   --attacks <list>   attack names or classes (e.g. control-flood), comma-separated (default: all)
//   --duration <s>     seconds per attack (default: 10)
//   --rate <n>         legitimate calls per second (default: 100)
//   --env K=V          extra environment for the spawned service; repeatable
//   --port <n>         attack the service already listening on 127.0.0.1:<n> (no spawning)
//   --pid <n>          with --port: its process id, for RSS and CPU (else "n/a")
//   --label <text>     with --port: the engine column's text (default: "attached")
//   --json <file>      also write every result as JSON
//
// Every attack runs against a freshly spawned service (memory backend, a one-rule config in
// a temp folder, loopback ports), so a crash or a leak of one attack does not spill into the
// next. With --port all attacks go to the same process, one after the other. A service that
// does not start (e.g. dist/ being rebuilt meanwhile) is listed under "Not run" at the end.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import {
  attachedTarget,
  attacks,
  markdownTable,
  resultNotes,
  runAttack,
  spawnAttackTarget,
  type Attack,
  type AttackResult,
  type AttackTarget,
  type SpawnedTarget,
} from "../test/helpers/h2-attacks.js";

const thisRepo = join(import.meta.dirname, "..", "..");

const { values } = parseArgs({
  options: {
    repo: { type: "string", default: thisRepo },
    engines: { type: "string", default: "builtin,node" },
    attacks: { type: "string", default: "" },
    duration: { type: "string", default: "10" },
    rate: { type: "string", default: "100" },
    env: { type: "string", multiple: true, default: [] },
    port: { type: "string" },
    pid: { type: "string" },
    label: { type: "string", default: "attached" },
    json: { type: "string" },
    list: { type: "boolean", default: false },
  },
  strict: true,
});

function positive(name: string, raw: string): number {
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0)
    throw new Error(`--${name} must be a positive number, got "${raw}"`);
  return n;
}

function selectedAttacks(list: string): Attack[] {
  if (list === "") return [...attacks];
  const names = list.split(",").map((s) => s.trim());
  const out = attacks.filter((a) =>
    names.some((n) => a.name === n || a.name.startsWith(`${n}/`)),
  );
  const unknown = names.filter(
    (n) => !attacks.some((a) => a.name === n || a.name.startsWith(`${n}/`)),
  );
  if (unknown.length > 0)
    throw new Error(
      `unknown attack ${unknown.join(", ")}; known: ${attacks.map((a) => a.name).join(", ")}`,
    );
  return out;
}

async function main(): Promise<void> {
  if (values.list) {
    for (const a of attacks) console.log(`${a.name}: ${a.description}`);
    return;
  }
  const durationMs = positive("duration", values.duration) * 1000;
  const legitRate = positive("rate", values.rate);
  const chosen = selectedAttacks(values.attacks);
  const env: Record<string, string> = {};
  for (const pair of values.env) {
    const eq = pair.indexOf("=");
    if (eq <= 0) throw new Error(`--env wants KEY=VALUE, got "${pair}"`);
    env[pair.slice(0, eq)] = pair.slice(eq + 1);
  }
  const results: AttackResult[] = [];
  const skipped: string[] = [];
  const report = (r: AttackResult): void => {
    results.push(r);
    console.error(
      `${r.attack} (${r.engine}): ${r.survived ? "survived" : `DID NOT SURVIVE (${r.exit?.split("\n")[0] ?? r.probe})`}, legit ${r.legit.ok} ok / ${r.legit.errors} errors, RSS +${r.rssGrowthMiB?.toFixed(1) ?? "n/a"} MiB, ${r.connectionsClosedByServer}/${r.connectionsOpened} connections closed by the server`,
    );
  };

  if (values.port !== undefined) {
    const port = positive("port", values.port);
    const pid =
      values.pid !== undefined ? positive("pid", values.pid) : undefined;
    const target: AttackTarget = attachedTarget(port, pid);
    for (const attack of chosen) {
      if (!target.isRunning()) break;
      report(
        await runAttack(target, attack, {
          engine: values.label,
          durationMs,
          legitRate,
        }),
      );
    }
  } else {
    const engines = values.engines.split(",").map((s) => s.trim());
    console.error(
      `service: ${join(values.repo, "dist", "src", "main.js")}; ${chosen.length} attacks × ${engines.length} engines, ${durationMs / 1000} s each`,
    );
    for (const engine of engines) {
      for (const attack of chosen) {
        let target: SpawnedTarget;
        try {
          target = await spawnAttackTarget({ repo: values.repo, engine, env });
        } catch (err) {
          // (e.g. the dist/ folder being rebuilt meanwhile): the other rows still count.
          skipped.push(`${attack.name} (${engine}): not run: ${String(err)}`);
          console.error(skipped.at(-1));
          continue;
        }
        try {
          report(
            await runAttack(target, attack, { engine, durationMs, legitRate }),
          );
        } finally {
          await target.stop();
        }
      }
    }
  }

  console.log(markdownTable(results));
  const notes = resultNotes(results);
  if (notes !== "") console.log(`\nNotes:\n\n${notes}`);
  if (skipped.length > 0)
    console.log(`\nNot run:\n\n${skipped.map((s) => `- ${s}`).join("\n")}`);
  if (values.json !== undefined)
    writeFileSync(values.json, JSON.stringify(results, null, 2));
}

await main();
