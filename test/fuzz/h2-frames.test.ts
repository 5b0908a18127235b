import { readFileSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { connect as connectHttp2, type IncomingHttpHeaders } from "node:http2";
import { connect as connectTcp } from "node:net";
import { tmpdir } from "node:os";
import { isAbsolute, join, relative } from "node:path";
import {
  setImmediate as nextTurn,
  setTimeout as sleep,
} from "node:timers/promises";
import { fromBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  RateLimitResponseSchema,
  RateLimitResponse_Code,
  type RateLimitResponse,
} from "../../src/proto.js";
import type { GrpcHttp2Engine } from "../../src/server/grpc/grpc-server.js";
import { errorCodeName, FrameType } from "../../src/http2/frames.js";
import { frame } from "../helpers/h2-raw-client.js";
import {
  memoryServiceEnv,
  repoRoot,
  spawnNode,
  type Spawned,
} from "../helpers/spawn-service.js";
import { waitFor } from "../helpers/wait-for.js";
import { encodeRequest, envelope, fuzzDomain } from "./generators.js";
import {
  connectionScript,
  describeScript,
  scriptWrites,
  type ConnectionScript,
} from "./h2-frame-generators.js";

// The HTTP/2 frame fuzzer: thousands of client connections, each sending a seeded sequence of
// frames (valid-looking requests to every route, mutated ones, stray and malformed frames,
// HPACK garbage, illegal header octets), to a spawned service process on each engine.
// Invariants: the process never exits and logs no error, what it sends back parses as HTTP/2
// frames no larger than the client allowed, a normal ShouldRateLimit call on a fresh
// connection succeeds after every batch, and RSS stays within `rssGrowthLimitMiB` of its
// value after start-up.
//
// Replay: FUZZ_SEED=<n> replays a run; FUZZ_SEED=<n> H2_FUZZ_CONNECTION=<i> replays one
// connection and prints every byte it sends (H2_FUZZ_REPEAT=<n> runs it n times);
// H2_FUZZ_CONNECTION=<i>-<j> runs connections i to j
// as the full run does (for failures that need several connections, or a garbage collection).
// H2_FUZZ_ENGINE=builtin|node runs one engine, FUZZ_SCALE multiplies the connection count,
// H2_FUZZ_SERVICE=<main.js> fuzzes another build.

const seed = Number(
  process.env["FUZZ_SEED"] ?? Math.floor(Math.random() * 2 ** 31),
);
const scale = Number(process.env["FUZZ_SCALE"] ?? 1);
const replayed = /^(\d+)(?:-(\d+))?$/.exec(
  process.env["H2_FUZZ_CONNECTION"] ?? "",
);
/** One connection to replay alone (H2_FUZZ_CONNECTION=<i>). */
const replay =
  replayed !== null && replayed[2] === undefined
    ? Number(replayed[1])
    : undefined;
/** First connection index and number of connections per engine. */
const [firstConnection, connectionCount] =
  replayed?.[2] !== undefined
    ? [Number(replayed[1]), Number(replayed[2]) - Number(replayed[1]) + 1]
    : [0, Math.max(50, Math.round(3000 * scale))];
/** Connections open at once. */
const concurrency = 50;
/** Times a replayed connection is run (H2_FUZZ_REPEAT, `concurrency` at a time). */
const repeat = Number(process.env["H2_FUZZ_REPEAT"] ?? 1);
/** Connections between two checks of the service; a range replay keeps the full run's batches. */
const batchSize = 300;
const batches = Math.ceil(connectionCount / batchSize);
const engines = (process.env["H2_FUZZ_ENGINE"] ?? "builtin,node").split(
  ",",
) as GrpcHttp2Engine[];
const entry = relative(
  repoRoot,
  isAbsolute(process.env["H2_FUZZ_SERVICE"] ?? "")
    ? (process.env["H2_FUZZ_SERVICE"] ?? "")
    : join(repoRoot, process.env["H2_FUZZ_SERVICE"] ?? "dist/src/main.js"),
);
/**
 * Bound on the service's RSS growth over the run, in MiB, measured after every batch against
 * its RSS after the first probe. The service starts near 80 MiB; a connection holds at most
 * 16 MiB of request data (`maxConnectionMemoryBytes`), and 50 are open at once.
 */
const rssGrowthLimitMiB = 256;
/** After the last write, a connection ends once the server has answered and been quiet this long. */
const quietMs = 20;
/** … or after this long in all. */
const maxWaitMs = 400;
/** Largest frame a server may send unless the client raised SETTINGS_MAX_FRAME_SIZE. */
const defaultMaxFrameBytes = 16_384;

const shouldRateLimitPath =
  "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

const config = `
domain: ${fuzzDomain}
descriptors:
  - key: a
    rate_limit: { unit: second, requests_per_unit: 5 }
  - key: path
    rate_limit: { unit: minute, requests_per_unit: 100 }
  - key: fuzz_probe
    rate_limit: { unit: hour, requests_per_unit: 3 }
`;

function rssMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1]) / 1024;
}

/** Script options per engine (see connectionScript's rapidResetBursts: a Node bug). */
function scriptOptions(engine: GrpcHttp2Engine): { rapidResetBursts: boolean } {
  return { rapidResetBursts: engine !== "node" };
}

/** A spawned service on one engine. */
interface Service {
  readonly spawned: Spawned;
  readonly grpcPort: number;
  dead(): boolean;
  /** Exited, or logged at error or fatal level (an uncaught exception logs fatal, then exits). */
  broken(): boolean;
  stop(): Promise<void>;
}

const errorLevel = /"level":"(error|fatal)"/;

async function startService(
  engine: GrpcHttp2Engine,
  root: string,
): Promise<Service> {
  const { env, grpcPort } = await memoryServiceEnv(engine, root, {
    EXPLAIN_ENABLED: "true",
  });
  const spawned = spawnNode(entry, [], env);
  let exited = false;
  let loggedError = false;
  void spawned.exited.then(() => (exited = true));
  const watch = (chunk: Buffer): void => {
    if (errorLevel.test(chunk.toString())) loggedError = true;
  };
  spawned.child.stdout?.on("data", watch);
  spawned.child.stderr?.on("data", watch);
  await waitFor(
    () => exited || spawned.output().includes("listening for gRPC"),
    "the service to listen",
    20_000,
  );
  return {
    spawned,
    grpcPort,
    dead: () => exited,
    broken: () => exited || loggedError,
    async stop() {
      if (!exited) spawned.child.kill("SIGKILL");
      await spawned.exited;
    },
  };
}

/** Lines the service logged at error or fatal level. */
function errorLines(service: Service): string[] {
  return service.spawned
    .output()
    .split("\n")
    .filter((l) => errorLevel.test(l));
}

/** A ShouldRateLimit call on a fresh connection (node:http2), within 5 s. */
async function shouldRateLimit(
  port: number,
  value: string,
): Promise<RateLimitResponse> {
  const message = encodeRequest({
    domain: fuzzDomain,
    descriptors: [{ entries: [{ key: "fuzz_probe", value }] }],
  });
  const session = connectHttp2(`http://127.0.0.1:${port}`);
  try {
    return await new Promise<RateLimitResponse>((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new Error("no answer in 5 s"));
      }, 5000);
      session.on("error", reject);
      const stream = session.request({
        ":method": "POST",
        ":path": shouldRateLimitPath,
        "content-type": "application/grpc",
        te: "trailers",
      });
      const chunks: Buffer[] = [];
      let grpcStatus = "";
      stream.on("trailers", (t: IncomingHttpHeaders) => {
        grpcStatus = String(t["grpc-status"]);
      });
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("error", reject);
      stream.on("end", () => {
        clearTimeout(timer);
        const body = Buffer.concat(chunks);
        if (grpcStatus !== "0" || body.length < 5)
          reject(new Error(`grpc-status ${grpcStatus}, ${body.length} bytes`));
        else resolve(fromBinary(RateLimitResponseSchema, body.subarray(5)));
      });
      stream.end(envelope(message, 0, message.length));
    });
  } finally {
    session.destroy();
  }
}

/** What the server did on one connection. */
interface Outcome {
  readonly closedByServer: boolean;
  /** GOAWAY error codes received. */
  readonly goaways: number[];
  readonly resets: number;
  readonly headers: number;
  /** Frames that break the server's side of RFC 9113 (too large, PUSH_PROMISE). */
  readonly violations: string[];
  readonly refused: boolean;
  /** The server's frames as `type/flags/stream`. */
  readonly frames: string[];
}

/** Parses what the server sent (an incomplete last frame is fine: we may have cut it off). */
function inspect(received: Buffer, script: ConnectionScript) {
  const goaways: number[] = [];
  const violations: string[] = [];
  const seen: string[] = [];
  let resets = 0;
  let headers = 0;
  let offset = 0;
  while (offset + 9 <= received.length) {
    const length = received.readUIntBE(offset, 3);
    const type = received[offset + 3] ?? 0;
    if (!script.raisedMaxFrameSize && length > defaultMaxFrameBytes)
      violations.push(
        `server frame of type ${type} with ${length} bytes at offset ${offset}`,
      );
    if (type === FrameType.pushPromise) violations.push("PUSH_PROMISE");
    if (offset + 9 + length > received.length) break;
    seen.push(
      `${type}/0x${(received[offset + 4] ?? 0).toString(16)}/${received.readUInt32BE(offset + 5)}`,
    );
    if (type === FrameType.goaway && length >= 8)
      goaways.push(received.readUInt32BE(offset + 13));
    if (type === FrameType.rstStream) resets++;
    if (type === FrameType.headers) headers++;
    offset += 9 + length;
  }
  return { goaways, violations, resets, headers, frames: seen };
}

/** Runs one script on a new TCP connection to `port`. */
async function runConnection(
  port: number,
  script: ConnectionScript,
): Promise<Outcome> {
  const socket = connectTcp({ host: "127.0.0.1", port });
  socket.setNoDelay(true);
  const chunks: Buffer[] = [];
  let kept = 0;
  let lastData: number;
  // An object, not a `let`: the close handler sets it between awaits.
  const state = { closed: false };
  let closedByUs: boolean;
  socket.on("data", (chunk: Buffer) => {
    if (kept < 1 << 20) {
      chunks.push(chunk);
      kept += chunk.length;
    }
    lastData = Date.now();
  });
  socket.on("error", () => undefined);
  const whenClosed = new Promise<void>((resolve) => {
    socket.once("close", () => {
      state.closed = true;
      resolve();
    });
  });
  const connected = await Promise.race([
    new Promise<boolean>((resolve) => {
      socket.once("connect", () => {
        resolve(true);
      });
    }),
    whenClosed.then(() => false),
  ]);
  if (!connected)
    return {
      closedByServer: false,
      goaways: [],
      resets: 0,
      headers: 0,
      violations: [],
      refused: true,
      frames: [],
    };
  for (const bytes of scriptWrites(script.parts, script.splits)) {
    if (state.closed) break;
    socket.write(bytes);
    if (script.slow) await sleep(1);
    else await nextTurn();
  }
  if (script.ending === "abort") {
    closedByUs = !state.closed;
    socket.destroy();
  } else {
    if (script.ending === "half-close") socket.end();
    if (script.ending === "goaway" && !state.closed)
      socket.write(frame(FrameType.goaway, 0, 0, Buffer.alloc(8)));
    // Until the server closes, or has answered and then been quiet, or the time is up.
    const start = Date.now();
    lastData = 0;
    while (!state.closed && Date.now() - start < maxWaitMs) {
      const wait =
        lastData === 0
          ? maxWaitMs - (Date.now() - start)
          : quietMs - (Date.now() - lastData);
      if (wait <= 0) break;
      await Promise.race([whenClosed, sleep(Math.min(wait, 10))]);
    }
    closedByUs = !state.closed;
    socket.destroy();
  }
  await whenClosed;
  return {
    closedByServer: !closedByUs,
    refused: false,
    ...inspect(Buffer.concat(chunks), script),
  };
}

/** Totals over a run, per hostility level, for the log. */
class Tally {
  readonly levels = new Map<
    number,
    { connections: number; closed: number; headers: number; resets: number }
  >();
  readonly goaways = new Map<string, number>();

  add(script: ConnectionScript, o: Outcome): void {
    const level = this.levels.get(script.hostility) ?? {
      connections: 0,
      closed: 0,
      headers: 0,
      resets: 0,
    };
    this.levels.set(script.hostility, level);
    level.connections++;
    if (o.closedByServer) level.closed++;
    level.headers += o.headers;
    level.resets += o.resets;
    for (const code of o.goaways) {
      const name = errorCodeName(code);
      this.goaways.set(name, (this.goaways.get(name) ?? 0) + 1);
    }
  }

  toString(): string {
    const levels = [...this.levels]
      .sort(([a], [b]) => a - b)
      .map(
        ([h, l]) =>
          `hostility ${h}: ${l.connections} connections, ${l.closed} closed by the server, ` +
          `${l.headers} HEADERS and ${l.resets} RST_STREAM received`,
      );
    const goaways = [...this.goaways].map(([name, n]) => `${name} ${n}`);
    return `${levels.join("; ")}; GOAWAY ${goaways.join(", ")}`;
  }
}

/** Runs `copies` connections with the same script, `concurrency` at a time. */
async function runCopies(
  port: number,
  script: ConnectionScript,
  copies: number,
): Promise<void> {
  await inParallel(
    0,
    copies,
    () => false,
    async () => {
      await runConnection(port, script);
    },
  );
}

/**
 * Copies of a script run when a failure needs more than one connection to show: node:http2's
 * session destructor checks its accounting when the garbage collector frees the session, so a
 * leak shows only once enough garbage has been made.
 */
const copiesForGc = 200;

/** Time the search for a failing connection may take, in ms (the test's timeout allows it). */
const diagnosisBudgetMs = 150_000;

/** Whether `copies` runs of `script` break a fresh service on `engine` (see {@link Service.broken}). */
async function crashes(
  engine: GrpcHttp2Engine,
  root: string,
  script: ConnectionScript,
  copies: number,
): Promise<boolean> {
  const service = await startService(engine, root);
  try {
    await runCopies(service.grpcPort, script, copies);
    await sleep(100);
    return service.broken();
  } finally {
    await service.stop();
  }
}

/**
 * Whether a service's output ends with Node's own assertion in the HTTP/2 session destructor
 * (`Http2Session::~Http2Session`, `current_nghttp2_memory_ == 0`): the known node:http2 abort
 * of docs/security.md, "Known issues".
 */
function isNodeHttp2SessionAbort(output: string): boolean {
  return (
    output.includes("Http2Session::~Http2Session") &&
    output.includes("current_nghttp2_memory_")
  );
}

/**
 * After the service broke: replays the connections that were running (and the ones just
 * before) one at a time on a fresh service to find the one that breaks it; failing that, each
 * {@link copiesForGc} times. Then drops parts of its script while it still does. Returns a
 * report for the failure message.
 */
async function diagnoseCrash(
  engine: GrpcHttp2Engine,
  root: string,
  candidates: readonly number[],
): Promise<string> {
  const deadline = Date.now() + diagnosisBudgetMs;
  let culprit: number | undefined;
  let copies = 1;
  let output = "";
  for (const tryCopies of [1, copiesForGc]) {
    let service = await startService(engine, root);
    try {
      for (const index of candidates) {
        if (Date.now() > deadline) break;
        if (service.broken()) {
          await service.stop();
          service = await startService(engine, root);
        }
        await runCopies(
          service.grpcPort,
          connectionScript(seed, index, scriptOptions(engine)),
          tryCopies,
        );
        await sleep(30);
        if (service.broken()) {
          culprit = index;
          copies = tryCopies;
          output = service.spawned.output();
          break;
        }
      }
    } finally {
      await service.stop();
    }
    if (culprit !== undefined) break;
  }
  if (culprit === undefined)
    return (
      `no connection among ${candidates[0] ?? ""}-${candidates.at(-1) ?? ""} breaks a fresh service alone, ` +
      `nor run ${copiesForGc} times (within ${diagnosisBudgetMs / 1000} s): the failure needs several of them`
    );
  const script = connectionScript(seed, culprit, scriptOptions(engine));
  // Minimise: one write, then without each part in turn (at most 30 tries, ~1 s each).
  let smallest: ConnectionScript = { ...script, splits: [], slow: false };
  if (!(await crashes(engine, root, smallest, copies))) smallest = script;
  else {
    for (
      let k = smallest.parts.length - 1, tries = 0;
      k >= 0 && tries < 30 && Date.now() < deadline;
      k--, tries++
    ) {
      const without = {
        ...smallest,
        parts: smallest.parts.filter((_, j) => j !== k),
      };
      if (await crashes(engine, root, without, copies)) smallest = without;
    }
  }
  return [
    `connection ${culprit} breaks the ${engine} engine${copies > 1 ? ` when run ${copies} times` : ""}: replay with ` +
      `FUZZ_SEED=${seed} H2_FUZZ_CONNECTION=${culprit} H2_FUZZ_ENGINE=${engine}${copies > 1 ? ` H2_FUZZ_REPEAT=${copies}` : ""}`,
    `its script:\n${describeScript(script)}`,
    `minimised (${smallest.parts.length} of ${script.parts.length} parts, every byte):\n${describeScript(smallest, true)}`,
    `service output (end):\n${output.slice(-3000)}`,
  ].join("\n");
}

/** Runs `work` for indices [from, to) with at most `concurrency` at once; stops early if told. */
async function inParallel(
  from: number,
  to: number,
  stop: () => boolean,
  work: (index: number) => Promise<void>,
): Promise<void> {
  let next = from;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < to && !stop()) await work(next++);
    }),
  );
}

describe.each(engines)("HTTP/2 frame fuzzer (%s engine)", (engine) => {
  let root = "";
  let service: Service;
  let probes = 0;

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), "rls-h2-fuzz-"));
    await mkdir(join(root, "config"));
    await writeFile(join(root, "config", "fuzz.yaml"), config);
    service = await startService(engine, root);
    console.log(
      `h2 frame fuzzer (${engine}): FUZZ_SEED=${seed}${replayed !== null ? ` H2_FUZZ_CONNECTION=${replayed[0]}` : ""}, service ${entry}`,
    );
  });

  afterAll(async () => {
    await service.stop();
    await rm(root, { recursive: true, force: true });
  });

  /** The process runs, logged no error, and answers a normal call on a fresh connection. */
  async function checkAlive(at: string): Promise<void> {
    expect(
      service.dead(),
      `service exited at ${at}, FUZZ_SEED=${seed}: ${service.spawned.output().slice(-3000)}`,
    ).toBe(false);
    expect(errorLines(service), `${at}, FUZZ_SEED=${seed}`).toEqual([]);
    const response = await shouldRateLimit(
      service.grpcPort,
      `${engine}-${seed}-${probes++}`,
    );
    expect(response.overallCode, `probe at ${at}`).toBe(
      RateLimitResponse_Code.OK,
    );
    expect(response.statuses[0]?.limitRemaining, `probe at ${at}`).toBe(2);
  }

  if (replay !== undefined) {
    it(`replays connection ${replay}`, async () => {
      const script = connectionScript(seed, replay, scriptOptions(engine));
      console.log(
        `connection ${replay} (FUZZ_SEED=${seed}):\n${describeScript(script, true)}`,
      );
      const outcome = await runConnection(service.grpcPort, script);
      if (repeat > 1) await runCopies(service.grpcPort, script, repeat - 1);
      console.log(
        `server: ${outcome.closedByServer ? "closed the connection" : "kept the connection"}, ` +
          `GOAWAY ${outcome.goaways.map(errorCodeName).join(",") || "none"}, ` +
          `${outcome.headers} HEADERS, ${outcome.resets} RST_STREAM; ` +
          `frames (type/flags/stream): ${outcome.frames.join(" ")}`,
      );
      await sleep(200);
      await checkAlive(`connection ${replay}`);
      expect(outcome.violations).toEqual([]);
    });
    return;
  }

  it(`survives ${connectionCount} seeded connections and answers a normal call after each batch`, async () => {
    const started = Date.now();
    await checkAlive("start");
    const pid = service.spawned.child.pid ?? 0;
    const rssStart = rssMiB(pid);
    let rssPeak = rssStart;
    const rssByBatch: string[] = [];
    const tally = new Tally();
    const order: number[] = [];
    // The connections started last when the service was first seen broken.
    let suspects: number[] | undefined;
    const violations: string[] = [];
    const per = batchSize;
    for (let batch = 0; batch < batches; batch++) {
      const from = firstConnection + batch * per;
      const to = Math.min(firstConnection + connectionCount, from + per);
      await inParallel(
        from,
        to,
        () => suspects !== undefined,
        async (index) => {
          order.push(index);
          const script = connectionScript(seed, index, scriptOptions(engine));
          const outcome = await runConnection(service.grpcPort, script);
          if (suspects === undefined && service.broken())
            suspects = order.slice(-2 * concurrency);
          tally.add(script, outcome);
          for (const v of outcome.violations)
            violations.push(
              `${v} (FUZZ_SEED=${seed} H2_FUZZ_CONNECTION=${index})`,
            );
        },
      );
      await sleep(50);
      if (suspects === undefined && service.broken())
        suspects = order.slice(-2 * concurrency);
      if (suspects !== undefined) {
        const how = service.dead()
          ? `exited (${String(await service.spawned.exited)})`
          : "logged an error";
        const output = service.spawned.output().slice(-4000);
        const report = await diagnoseCrash(engine, root, suspects);
        if (
          engine === "node" &&
          isNodeHttp2SessionAbort(output) &&
          report.startsWith("no connection among")
        ) {
          // Node's own abort (docs/security.md, "Known issues"): timing-dependent, reproduced by
          // no single connection; not a fault of this service's code. The built-in engine (the
          // default) runs the same scripts without it. The run ends here, loudly.
          console.warn(
            `h2 frame fuzzer (node, FUZZ_SEED=${seed}): Node aborted in ~Http2Session ` +
              `(current_nghttp2_memory_ == 0, nodejs/node#35233 family) during batch ${batch}; ` +
              `${report}; the remaining batches are skipped`,
          );
          return;
        }
        expect.fail(
          `the ${engine} service ${how} during batch ${batch} (FUZZ_SEED=${seed}; replay the batch with ` +
            `FUZZ_SEED=${seed} H2_FUZZ_ENGINE=${engine} H2_FUZZ_CONNECTION=${from}-${to - 1}):\n${report}\n` +
            `its output (end):\n${output}`,
        );
      }
      await checkAlive(`batch ${batch} (connections ${from}-${to - 1})`);
      expect(violations, `batch ${batch}`).toEqual([]);
      const rss = rssMiB(pid);
      rssByBatch.push(rss.toFixed(0));
      rssPeak = Math.max(rssPeak, rss);
    }
    console.log(
      `h2 frame fuzzer (${engine}, FUZZ_SEED=${seed}): ${tally.toString()}; ` +
        `RSS ${rssStart.toFixed(0)} MiB at start, ${rssByBatch.join(", ")} MiB after each batch; ` +
        `${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
    expect(
      rssPeak - rssStart,
      `RSS growth in MiB (FUZZ_SEED=${seed})`,
    ).toBeLessThan(rssGrowthLimitMiB);
  }, 420_000);
});
