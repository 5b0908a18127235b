import { gzipSync } from "node:zlib";
import {
  clientPreface,
  ErrorCode,
  Flag,
  FrameType,
  SettingId,
} from "../../src/http2/frames.js";
import { huffmanCodeLengths, huffmanCodes } from "../../src/http2/huffman.js";
import {
  frame,
  grpcRequestFields,
  headerBlock,
  settingsPayload,
  u32,
} from "../helpers/h2-raw-client.js";
import { encodeRequest, envelope, fuzzDomain } from "./generators.js";

/**
 * Seeded HTTP/2 connection scripts for test/fuzz/h2-frames.test.ts: what one client connection
 * sends, built from (seed, connection index) alone so any connection can be replayed. A script
 * is a list of named parts (preface, SETTINGS, request streams, stray frames), each a list of
 * frames; parts are often mutated at the frame or byte level. Header blocks are HPACK built
 * here by hand as well as with the server's encoder, so names and values can hold any octet.
 */

/** A small seeded random source (xorshift32 over a mixed seed). Not for anything but tests. */
export class Rng {
  private state: number;

  constructor(seed: number) {
    this.state = mix(seed) || 0x9e3779b9;
  }

  /** A uniform 32-bit unsigned integer. */
  uint32(): number {
    let x = this.state;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.state = x >>> 0;
    return this.state;
  }

  /** An integer in [0, n). */
  int(n: number): number {
    return Math.floor((this.uint32() / 0x1_0000_0000) * n);
  }

  /** An integer in [lo, hi]. */
  between(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1);
  }

  chance(p: number): boolean {
    return this.uint32() / 0x1_0000_0000 < p;
  }

  pick<T>(items: readonly T[]): T {
    const item = items[this.int(items.length)];
    if (item === undefined) throw new Error("pick from an empty list");
    return item;
  }

  /** Calls one of `choices`, chosen with probability proportional to its weight. */
  weighted<T>(choices: readonly (readonly [number, () => T])[]): T {
    let total = 0;
    for (const [w] of choices) total += w;
    let r = this.int(total);
    for (const [w, make] of choices) {
      if (r < w) return make();
      r -= w;
    }
    throw new Error("no choice");
  }

  bytes(n: number): Buffer {
    const out = Buffer.alloc(n);
    for (let i = 0; i < n; i++) out[i] = this.uint32() & 0xff;
    return out;
  }
}

/** A 32-bit avalanche mix (murmur3's finaliser). */
function mix(x: number): number {
  x = Math.imul(x ^ (x >>> 16), 0x85ebca6b);
  x = Math.imul(x ^ (x >>> 13), 0xc2b2ae35);
  return (x ^ (x >>> 16)) >>> 0;
}

/** The random seed of connection `index` of a run seeded with `seed`. */
export function connectionSeed(seed: number, index: number): number {
  return mix((mix(seed >>> 0) ^ Math.imul(index + 1, 0x9e3779b1)) >>> 0);
}

// ---------------------------------------------------------------------------------------------
// HPACK by hand (RFC 7541 §5, §6)

/** An HPACK integer with an N-bit prefix, `flags` in the bits above it (§5.1). */
export function hpackInteger(
  value: number,
  prefixBits: number,
  flags: number,
): Buffer {
  const max = (1 << prefixBits) - 1;
  if (value < max) return Buffer.from([flags | value]);
  const out = [flags | max];
  let rest = value - max;
  while (rest >= 128) {
    out.push((rest % 128) + 128);
    rest = Math.floor(rest / 128);
  }
  out.push(rest);
  return Buffer.from(out);
}

/** The Huffman encoding of `octets`, padded with the EOS prefix (§5.2). */
export function huffmanEncode(octets: Uint8Array): Buffer {
  const out: number[] = [];
  let acc = 0;
  let bits = 0;
  for (const octet of octets) {
    const length = huffmanCodeLengths[octet] ?? 0;
    acc = acc * 2 ** length + (huffmanCodes[octet] ?? 0);
    bits += length;
    while (bits >= 8) {
      const shift = 2 ** (bits - 8);
      out.push(Math.floor(acc / shift) & 0xff);
      acc %= shift;
      bits -= 8;
    }
  }
  if (bits > 0) out.push(((acc << (8 - bits)) | (0xff >> bits)) & 0xff);
  return Buffer.from(out);
}

/** An HPACK string literal, raw or Huffman-coded (§5.2). */
export function hpackString(octets: Uint8Array, huffman = false): Buffer {
  const body = huffman ? huffmanEncode(octets) : Buffer.from(octets);
  return Buffer.concat([
    hpackInteger(body.length, 7, huffman ? 0x80 : 0),
    body,
  ]);
}

type Indexing = "incremental" | "without" | "never";

/**
 * A literal header field (§6.2): the name a static/dynamic table index or literal octets, the
 * value literal octets. Nothing is validated: any octet goes.
 */
export function literalField(
  name: number | Uint8Array,
  value: Uint8Array,
  indexing: Indexing = "without",
  huffman: { name?: boolean; value?: boolean } = {},
): Buffer {
  const [prefix, flags] =
    indexing === "incremental"
      ? [6, 0x40]
      : indexing === "never"
        ? [4, 0x10]
        : [4, 0x00];
  const head =
    typeof name === "number"
      ? hpackInteger(name, prefix, flags)
      : Buffer.concat([
          Buffer.from([flags]),
          hpackString(name, huffman.name ?? false),
        ]);
  return Buffer.concat([head, hpackString(value, huffman.value ?? false)]);
}

/** An indexed header field (§6.1). */
export function indexedField(index: number): Buffer {
  return hpackInteger(index, 7, 0x80);
}

/** A dynamic table size update (§6.3). */
export function tableSizeUpdate(size: number): Buffer {
  return hpackInteger(size, 5, 0x20);
}

const latin1 = (text: string): Buffer => Buffer.from(text, "latin1");

// ---------------------------------------------------------------------------------------------
// Requests

const shouldRateLimitPath =
  "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/** A request before framing: header fields (text, one octet per character) and a body. */
interface Request {
  readonly label: string;
  readonly fields: [string, string][];
  readonly body: Buffer;
}

function rateLimitMessage(rng: Rng): Buffer {
  return Buffer.from(
    encodeRequest({
      domain: rng.chance(0.9) ? fuzzDomain : rng.pick(["", "other", "é"]),
      descriptors: [
        {
          entries: [
            {
              key: rng.pick(["a", "b", "path", "fuzz_h2"]),
              value: rng.pick(["1", "x", String(rng.int(1000))]),
            },
          ],
        },
      ],
      hitsAddend: rng.chance(0.1) ? rng.int(5) : 0,
    }),
  );
}

function request(
  label: string,
  path: string,
  contentType: string | undefined,
  body: Buffer,
  extra: [string, string][] = [],
  method = "POST",
): Request {
  return {
    label,
    fields: [
      [":method", method],
      [":scheme", "http"],
      [":path", path],
      [":authority", "localhost"],
      ...(contentType !== undefined
        ? ([["content-type", contentType]] as [string, string][])
        : []),
      ...extra,
    ],
    body,
  };
}

/** A request to one of the service's routes (fast path, Connect router) or to none. */
function baseRequest(rng: Rng): Request {
  const message = rateLimitMessage(rng);
  const framed = envelope(message, 0, message.length);
  return rng.weighted<Request>([
    [
      6,
      () => ({
        label: "grpc",
        fields: grpcRequestFields(),
        body: framed,
      }),
    ],
    [
      3,
      () => {
        const zipped = gzipSync(message);
        return {
          label: "grpc gzip",
          fields: grpcRequestFields([
            ["grpc-encoding", "gzip"],
            ["grpc-accept-encoding", "gzip"],
          ]),
          body: rng.chance(0.8)
            ? envelope(zipped, 1, zipped.length)
            : envelope(message, 1, message.length),
        };
      },
    ],
    [
      3,
      () =>
        request(
          "grpc-web",
          shouldRateLimitPath,
          rng.pick(["application/grpc-web+proto", "application/grpc-web"]),
          framed,
          [["x-grpc-web", "1"]],
        ),
    ],
    [
      2,
      () =>
        request(
          "grpc-web-text",
          shouldRateLimitPath,
          "application/grpc-web-text",
          latin1(framed.toString("base64")),
        ),
    ],
    [
      3,
      () =>
        request(
          "connect proto",
          shouldRateLimitPath,
          "application/proto",
          rng.chance(0.3) ? gzipSync(message) : message,
          rng.chance(0.3)
            ? [
                ["content-encoding", "gzip"],
                ["connect-protocol-version", "1"],
              ]
            : [["connect-protocol-version", "1"]],
        ),
    ],
    [
      2,
      () =>
        request(
          "connect json",
          shouldRateLimitPath,
          "application/json",
          latin1(
            JSON.stringify({
              domain: fuzzDomain,
              descriptors: [{ entries: [{ key: "a", value: "1" }] }],
            }),
          ),
          [["connect-timeout-ms", rng.pick(["1000", "0", "x", "-1"])]],
        ),
    ],
    [
      1,
      () =>
        request(
          "connect get",
          `${shouldRateLimitPath}?connect=v1&encoding=${rng.pick(["proto", "json", "x"])}&message=${rng.pick(["", "%zz", message.toString("base64url"), "e30"])}${rng.chance(0.5) ? "&base64=1" : ""}`,
          undefined,
          Buffer.alloc(0),
          [],
          "GET",
        ),
    ],
    [
      1,
      () =>
        request(
          "connect streaming",
          shouldRateLimitPath,
          "application/connect+proto",
          framed,
        ),
    ],
    [
      2,
      () =>
        request(
          "health",
          rng.pick([
            "/grpc.health.v1.Health/Check",
            "/grpc.health.v1.Health/Watch",
            "/grpc.health.v1.Health/List",
          ]),
          rng.pick(["application/grpc", "application/grpc-web+proto"]),
          envelope(Buffer.alloc(0), 0, 0),
          [["te", "trailers"]],
        ),
    ],
    [
      1,
      () =>
        request(
          "explain",
          "/ratelimit.explain.v1.ExplainService/Explain",
          rng.pick(["application/proto", "application/grpc"]),
          message,
        ),
    ],
    [
      2,
      () =>
        request(
          "unknown path",
          rng.pick([
            "/",
            "/nope",
            "/envoy.service.ratelimit.v3.RateLimitService/Nope",
            "/healthcheck",
            "/json",
            "*",
            "/a?b=%ff",
          ]),
          rng.pick(["application/grpc", "text/plain", "application/json"]),
          rng.chance(0.5) ? framed : Buffer.alloc(0),
          [],
          rng.pick(["POST", "GET", "PUT", "OPTIONS"]),
        ),
    ],
  ]);
}

/** Header names HTTP/2 forbids (RFC 9113 §8.2.1) or `Headers` / `URL` would choke on. */
const illegalNames = [
  "x y",
  "x\0y",
  "\0",
  "x\ry",
  "x\ny",
  "x\ty",
  "\x01",
  "x\x7f",
  "X-Upper",
  "x:y",
  ":",
  "",
  " ",
  "x(y)",
  'x"',
  "x@y",
  "é",
  "x\xff",
  "content-type ",
  "\x80\x81",
];

/** Header values HTTP/2 forbids (NUL, CR, LF, edge whitespace) and other odd octets. */
const illegalValues = [
  "a\0b",
  "\0",
  "a\rb",
  "a\nb",
  "a\r\nx-injected: 1",
  " lead",
  "trail\t",
  "\t",
  "\x7f",
  "\xff\xfe",
  "é",
  "%00",
  "",
];

/** Changes to a request's header fields, or none. */
function mutateFields(rng: Rng, fields: [string, string][]): string {
  const at = () => rng.int(fields.length + 1);
  const changes: string[] = [];
  const count = rng.weighted<number>([
    [5, () => 0],
    [4, () => 1],
    [1, () => rng.between(2, 4)],
  ]);
  for (let k = 0; k < count; k++) {
    const change = rng.weighted<string>([
      [
        4,
        () => {
          fields.splice(at(), 0, [rng.pick(illegalNames), "1"]);
          return "illegal name";
        },
      ],
      [
        4,
        () => {
          const name = rng.pick([
            "x-v",
            "content-type",
            "grpc-encoding",
            "te",
            "grpc-timeout",
            "user-agent",
            "authorization",
          ]);
          fields.splice(at(), 0, [name, rng.pick(illegalValues)]);
          return `illegal value in ${name}`;
        },
      ],
      [
        1,
        () => {
          fields.splice(at(), 0, [
            rng.bytes(rng.between(1, 8)).toString("latin1"),
            rng.bytes(rng.between(0, 8)).toString("latin1"),
          ]);
          return "random octets";
        },
      ],
      [
        2,
        () => {
          const pseudo = rng.pick([
            ":method",
            ":path",
            ":scheme",
            ":authority",
            ":status",
            ":protocol",
            ":foo",
          ]);
          fields.splice(at(), 0, [
            pseudo,
            rng.pick(["", "GET", "/", "http", "x y", "\0", "200"]),
          ]);
          return `extra ${pseudo}`;
        },
      ],
      [
        2,
        () => {
          const i = rng.int(fields.length);
          const removed = fields.splice(i, 1)[0]?.[0] ?? "";
          return `without ${removed}`;
        },
      ],
      [
        2,
        () => {
          const which = rng.pick([":path", ":authority", ":method", ":scheme"]);
          const field = fields.find(([n]) => n === which);
          if (field !== undefined)
            field[1] = rng.pick([
              "",
              "noslash",
              "http://h/x",
              "/%zz",
              "//x",
              "/\xff",
              "a b",
              "[::1",
              "u@h",
              "h:99999",
              "get",
              "CONNECT",
              "https",
              "/" + "a".repeat(rng.pick([100, 8000, 70_000])),
            ]);
          return `odd ${which}`;
        },
      ],
      [
        2,
        () => {
          fields.splice(at(), 0, [
            rng.pick([
              "connection",
              "keep-alive",
              "transfer-encoding",
              "upgrade",
              "te",
              "proxy-connection",
            ]),
            rng.pick(["gzip", "close", "chunked", "trailers", "h2c"]),
          ]);
          return "connection-specific field";
        },
      ],
      [
        2,
        () => {
          fields.push([
            "content-length",
            rng.pick([
              "0",
              "1",
              "99999",
              "-1",
              "x",
              "1,1",
              " 5",
              "18446744073709551616",
            ]),
          ]);
          return "content-length";
        },
      ],
      [
        1,
        () => {
          fields.push([
            "grpc-timeout",
            rng.pick(["1n", "1H", "99999999H", "-1S", "1x", "", "100000000m"]),
          ]);
          return "grpc-timeout";
        },
      ],
      [
        1,
        () => {
          const size = rng.pick([4000, 16_000, 65_000, 70_000]);
          fields.push(["x-big", "v".repeat(size)]);
          return `value of ${size} bytes`;
        },
      ],
      [
        1,
        () => {
          const n = rng.pick([100, 1000, 3000]);
          for (let i = 0; i < n; i++) fields.push([`x-${i}`, "v"]);
          return `${n} fields`;
        },
      ],
      [
        1,
        () => {
          for (let i = 0; i < 4; i++) fields.push(["cookie", `c${i}=v`]);
          return "cookies";
        },
      ],
    ]);
    changes.push(change);
  }
  return changes.join(", ");
}

/** Connection state a script builder keeps. */
interface ScriptState {
  readonly rng: Rng;
  /**
   * How hostile the connection is: 0 (only what a server must survive without closing the
   * connection: stream errors, ignorable frames), 0.5, or 1.5 (connection errors often).
   */
  readonly hostility: number;
  nextStreamId: number;
  /** Whether some SETTINGS raised MAX_FRAME_SIZE above 16,384 (server frames may be larger). */
  raisedMaxFrameSize: boolean;
  /** Whether bursts of 200 HEADERS + RST_STREAM pairs may be sent (see connectionScript). */
  readonly rapidResetBursts: boolean;
}

/** True with probability `p` scaled by the connection's hostility: a connection error, usually. */
function risky(state: ScriptState, p: number): boolean {
  return state.rng.chance(Math.min(1, p * state.hostility));
}

/**
 * Encodes fields as one header block: mostly the server's own encoder when it accepts them,
 * else (and sometimes anyway) field by field by hand, with Huffman, indexing and size-update
 * variations that change the block without changing its meaning, or HPACK-level garbage.
 */
function encodeBlock(
  rng: Rng,
  state: ScriptState,
  fields: [string, string][],
): { block: Buffer; note: string } {
  const legal = fields.every(
    ([n, v]) => !/[A-Z\u0100-\uffff]/.test(n) && !/[\u0100-\uffff]/.test(v),
  );
  const pieces: Buffer[] = [];
  const notes: string[] = [];
  if (rng.chance(0.1)) {
    // Above SETTINGS_HEADER_TABLE_SIZE (4096) is a COMPRESSION_ERROR.
    const size = risky(state, 0.5)
      ? rng.pick([8192, 1 << 20, 0xffff_ffff])
      : rng.pick([0, 100, 4096]);
    pieces.push(tableSizeUpdate(size));
    if (rng.chance(0.3)) pieces.push(tableSizeUpdate(rng.pick([0, 4096])));
    notes.push(`table size update ${size}`);
  }
  if (legal && rng.chance(0.6)) {
    pieces.push(headerBlock(fields));
  } else {
    const indexing = rng.pick<Indexing>(["without", "incremental", "never"]);
    const huffman = rng.chance(0.3);
    for (const [name, value] of fields) {
      pieces.push(
        literalField(latin1(name), latin1(value), indexing, {
          name: huffman,
          value: huffman,
        }),
      );
    }
    notes.push(`by hand (${indexing}${huffman ? ", huffman" : ""})`);
  }
  if (risky(state, 0.12)) {
    const [piece, note] = rng.weighted<[Buffer, string]>([
      [2, () => [indexedField(0), "index 0"]],
      [2, () => [indexedField(rng.between(62, 5000)), "index past the table"]],
      [
        2,
        () => [
          Buffer.concat([
            Buffer.from([0x00, 0x81]),
            rng.bytes(1),
            hpackString(latin1("v")),
          ]),
          "1-byte huffman name of garbage",
        ],
      ],
      [
        3,
        () => {
          const junk = rng.bytes(rng.between(1, 12));
          return [
            Buffer.concat([
              Buffer.from([0x00]),
              hpackString(latin1("x-h")),
              hpackInteger(junk.length, 7, 0x80),
              junk,
            ]),
            "huffman garbage value",
          ];
        },
      ],
      [
        1,
        () => [
          Buffer.concat([
            Buffer.from([0x00]),
            hpackString(latin1("x-h")),
            Buffer.from([0x80 | 4, 0xff, 0xff, 0xff, 0xff]),
          ]),
          "huffman EOS",
        ],
      ],
      [
        2,
        () => [
          Buffer.from([0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]),
          "integer overflow",
        ],
      ],
      [
        2,
        () => [
          Buffer.concat([Buffer.from([0x00]), hpackInteger(5000, 7, 0)]),
          "string past the block",
        ],
      ],
      [
        2,
        () => [
          tableSizeUpdate(rng.pick([0, 4096, 8192])),
          "size update after a field",
        ],
      ],
      [
        1,
        () => [
          literalField(
            latin1("x-fill"),
            latin1("v".repeat(rng.pick([10, 4000, 5000]))),
            "incremental",
          ),
          "fills the dynamic table",
        ],
      ],
      [1, () => [rng.bytes(rng.between(1, 32)), "random octets"]],
    ]);
    pieces.splice(rng.int(pieces.length + 1), 0, piece);
    notes.push(note);
  }
  return { block: Buffer.concat(pieces), note: notes.join(", ") };
}

/** HEADERS (+ PADDED, PRIORITY) and CONTINUATION frames carrying `block`. */
function headerFrames(
  rng: Rng,
  state: ScriptState,
  streamId: number,
  block: Buffer,
  endStream: boolean,
): { frames: Buffer[]; note: string } {
  const notes: string[] = [];
  let flags = endStream ? Flag.endStream : 0;
  let prefix = Buffer.alloc(0);
  let padding = Buffer.alloc(0);
  if (rng.chance(0.15)) {
    flags |= Flag.padded;
    const padLength = rng.pick([0, 1, 10, 255]);
    padding = Buffer.alloc(padLength);
    // Sometimes a pad length larger than the frame (a connection error, §6.2).
    const declared = risky(state, 0.2) ? 255 : padLength;
    if (declared !== padLength) padding = Buffer.alloc(rng.int(padLength + 1));
    prefix = Buffer.from([declared]);
    notes.push(`padded ${declared}/${padding.length}`);
  }
  if (rng.chance(0.15)) {
    flags |= Flag.priority;
    // On itself: a stream error (§5.3.1); on an idle stream: fine.
    const dependency = risky(state, 0.3)
      ? streamId
      : rng.pick([0, streamId + 2, 0x7fff_ffff]);
    const priority = Buffer.alloc(5);
    priority.writeUInt32BE(
      ((rng.chance(0.3) ? 0x8000_0000 : 0) | dependency) >>> 0,
    );
    priority[4] = rng.int(256);
    prefix = Buffer.concat([prefix, priority]);
    notes.push(`priority on ${dependency}`);
  }
  const pieces: Buffer[] = [];
  const count = rng.weighted<number>([
    [8, () => 1],
    [3, () => rng.between(2, 4)],
    // More than 8 CONTINUATION frames: over the engines' limit (CVE-2024-28182).
    [state.hostility, () => rng.between(5, 12)],
    [state.hostility, () => rng.between(20, 200)],
  ]);
  let offset = 0;
  for (let i = 0; i < count; i++) {
    const end =
      i === count - 1
        ? block.length
        : Math.min(block.length, offset + rng.int(block.length - offset + 1));
    pieces.push(block.subarray(offset, end));
    offset = end;
  }
  if (count > 1) notes.push(`${count - 1} CONTINUATION`);
  const frames: Buffer[] = [];
  pieces.forEach((piece, i) => {
    const last = i === pieces.length - 1;
    frames.push(
      i === 0
        ? frame(
            FrameType.headers,
            flags | (last ? Flag.endHeaders : 0),
            streamId,
            Buffer.concat([prefix, piece, padding]),
          )
        : frame(
            FrameType.continuation,
            last ? Flag.endHeaders : 0,
            streamId,
            piece,
          ),
    );
  });
  if (count > 1 && risky(state, 0.1)) {
    // Something else in the middle of the block (a connection error, §6.10).
    frames.splice(
      rng.between(1, frames.length - 1),
      0,
      rng.pick([
        frame(FrameType.ping, 0, 0, Buffer.alloc(8)),
        frame(FrameType.data, 0, streamId, Buffer.from("x")),
        frame(FrameType.continuation, Flag.endHeaders, streamId + 2),
        frame(0x0b, 0, 0, Buffer.from("unknown")),
      ]),
    );
    notes.push("frame inside the block");
  }
  if (risky(state, 0.05)) {
    frames.pop();
    notes.push("block never ends");
  }
  return { frames, note: notes.join(", ") };
}

/** DATA frames for `body`, END_STREAM on the last (usually), optional padding and trailers. */
function dataFrames(
  rng: Rng,
  state: ScriptState,
  streamId: number,
  body: Buffer,
  trailers: boolean,
): { frames: Buffer[]; note: string } {
  const notes: string[] = [];
  const frames: Buffer[] = [];
  const count = body.length === 0 ? 1 : rng.between(1, 4);
  let offset = 0;
  const endOnData = !trailers && rng.chance(0.95);
  if (!trailers && !endOnData) notes.push("no END_STREAM");
  for (let i = 0; i < count; i++) {
    const last = i === count - 1;
    const end = last
      ? body.length
      : Math.min(body.length, offset + rng.int(body.length - offset + 1));
    let flags = last && endOnData ? Flag.endStream : 0;
    let payload = body.subarray(offset, end);
    if (rng.chance(0.1)) {
      flags |= Flag.padded;
      const pad = rng.pick([0, 3, 200]);
      const declared = risky(state, 0.2) ? pad + payload.length + 1 : pad;
      payload = Buffer.concat([
        Buffer.from([declared & 0xff]),
        payload,
        Buffer.alloc(pad),
      ]);
      notes.push(`padded DATA ${declared}`);
    }
    frames.push(frame(FrameType.data, flags, streamId, payload));
    offset = end;
  }
  if (trailers) {
    const fields: [string, string][] = rng.pick([
      [["x-trailer", "1"]],
      [[":path", "/"]],
      [["grpc-status", "0"]],
      [["x\0", "1"]],
    ]);
    frames.push(
      frame(
        FrameType.headers,
        Flag.endStream | Flag.endHeaders,
        streamId,
        Buffer.concat(
          fields.map(([n, v]) => literalField(latin1(n), latin1(v))),
        ),
      ),
    );
    notes.push(`trailers ${JSON.stringify(fields)}`);
  }
  return { frames, note: notes.join(", ") };
}

/** One named piece of a script: a list of frames (or raw bytes in one "frame"). */
export interface ScriptPart {
  readonly label: string;
  readonly frames: Buffer[];
}

/** A request stream: HEADERS (+ CONTINUATION), DATA, maybe trailers, resets, more frames. */
function requestStream(rng: Rng, state: ScriptState): ScriptPart {
  const base = baseRequest(rng);
  const fields = base.fields.map(([n, v]): [string, string] => [n, v]);
  const fieldChanges = mutateFields(rng, fields);
  let body = base.body;
  if (body.length > 0 && rng.chance(0.1)) {
    body = rng.pick([
      body.subarray(0, rng.int(body.length)),
      rng.bytes(rng.between(1, 64)),
      Buffer.concat([body, rng.bytes(8)]),
    ]);
  }
  // Past the initial window without waiting for WINDOW_UPDATE: a FLOW_CONTROL_ERROR.
  if (risky(state, 0.02)) body = Buffer.alloc(rng.pick([70_000, 200_000]), 1);
  const h = state.hostility;
  const streamId = rng.weighted<number>([
    [20, () => state.nextStreamId],
    [h, () => 0],
    [h, () => state.nextStreamId + 1],
    [h, () => Math.max(1, state.nextStreamId - 2)],
    [h, () => 0x7fff_ffff],
  ]);
  if (streamId === state.nextStreamId) state.nextStreamId += 2;
  else if (streamId === 0x7fff_ffff) state.nextStreamId = 0x7fff_ffff;
  const trailers = body.length > 0 && rng.chance(0.05);
  const { block, note: blockNote } = encodeBlock(rng, state, fields);
  const headers = headerFrames(rng, state, streamId, block, body.length === 0);
  const data =
    body.length > 0
      ? dataFrames(rng, state, streamId, body, trailers)
      : { frames: [], note: "" };
  const frames = [...headers.frames, ...data.frames];
  const extras: string[] = [];
  if (rng.chance(0.08)) {
    frames.splice(
      headers.frames.length + rng.int(data.frames.length + 1),
      0,
      frame(FrameType.rstStream, 0, streamId, u32(rng.pick([0, 8, 1, 0xff]))),
    );
    extras.push("RST_STREAM");
  }
  if (risky(state, 0.05)) {
    frames.push(
      frame(FrameType.data, Flag.endStream, streamId, Buffer.from("late")),
    );
    extras.push("DATA after the end");
  }
  if (risky(state, 0.05)) {
    frames.push(
      frame(
        FrameType.windowUpdate,
        0,
        streamId,
        u32(rng.pick([0, 1, 0x7fff_ffff])),
      ),
    );
    extras.push("WINDOW_UPDATE");
  }
  const label = [
    `${base.label} stream ${streamId}`,
    fieldChanges,
    blockNote,
    headers.note,
    data.note,
    extras.join(", "),
  ]
    .filter((s) => s !== "")
    .join("; ");
  return { label, frames };
}

/** SETTINGS: plausible values, out-of-range ones, odd lengths, ACKs with payloads. */
function settingsPart(rng: Rng, state: ScriptState): ScriptPart {
  const ids = Object.values(SettingId) as number[];
  const pairs: [number, number][] = [];
  const n = rng.weighted<number>([
    [6, () => rng.int(4)],
    [1, () => rng.between(5, 40)],
    [state.hostility, () => 1000],
  ]);
  for (let i = 0; i < n; i++) {
    const id = rng.chance(0.85) ? rng.pick(ids) : rng.int(0x10000);
    const value = rng.weighted<number>([
      [
        4,
        () =>
          id === SettingId.enablePush
            ? rng.int(2)
            : id === SettingId.maxFrameSize
              ? rng.pick([16_384, 32_768, 0xff_ffff])
              : rng.pick([0, 1, 100, 4096, 65_535, 1 << 20]),
      ],
      [
        state.hostility,
        () =>
          rng.pick([
            2, 16_383, 0x100_0000, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff,
          ]),
      ],
    ]);
    if (id === SettingId.maxFrameSize && value > 16_384)
      state.raisedMaxFrameSize = true;
    pairs.push([id, value >>> 0]);
  }
  let payload = settingsPayload(pairs);
  let flags = 0;
  let streamId = 0;
  const notes: string[] = [];
  if (rng.chance(0.05)) {
    payload = payload.subarray(
      0,
      Math.max(0, payload.length - rng.between(1, 5)),
    );
    notes.push("length not a multiple of 6");
  }
  if (rng.chance(0.05)) {
    flags = Flag.ack;
    notes.push("ACK");
  }
  if (rng.chance(0.03)) {
    streamId = rng.between(1, 9);
    notes.push(`on stream ${streamId}`);
  }
  return {
    label: `SETTINGS ${pairs
      .map(([id, v]) => `${id}=${v}`)
      .join(",")
      .slice(0, 120)}${notes.length > 0 ? ` (${notes.join(", ")})` : ""}`,
    frames: [frame(FrameType.settings, flags, streamId, payload)],
  };
}

/**
 * Frames that are not requests: control frames (valid, misplaced or malformed), unknown types,
 * frames on the wrong stream, oversize frames, rapid resets, garbage.
 */
function strayPart(rng: Rng, state: ScriptState): ScriptPart {
  const recent = Math.max(1, state.nextStreamId - 2);
  const idle = state.nextStreamId;
  const h = state.hostility;
  const part = (label: string, ...frames: Buffer[]): ScriptPart => ({
    label,
    frames,
  });
  const times = (n: number, make: () => Buffer): Buffer[] =>
    Array.from({ length: n }, make);
  return rng.weighted<ScriptPart>([
    [
      3,
      () => {
        const stream = rng.pick([0, recent]);
        // 0, or a window past 2^31 − 1, is an error (§6.9, §6.9.1).
        const increment = risky(state, 0.5)
          ? rng.pick([0, 0x7fff_ffff, 0xffff_ffff])
          : rng.pick([1, 65_535, 1 << 20]);
        const payload = risky(state, 0.1)
          ? Buffer.alloc(rng.pick([0, 3, 5]))
          : u32(increment);
        const n = rng.pick([1, 1, 2, 50]);
        return part(
          `${n} WINDOW_UPDATE ${increment} on ${stream} (${payload.length} bytes)`,
          ...times(n, () => frame(FrameType.windowUpdate, 0, stream, payload)),
        );
      },
    ],
    [
      3,
      () => {
        const length = risky(state, 0.15) ? rng.pick([0, 7, 9, 64]) : 8;
        // An ACK for a PING never sent: node:http2 ends the session on it.
        const ack = risky(state, 0.2);
        const stream = risky(state, 0.05) ? 1 : 0;
        // Beyond ~1000 in a burst: a flood (GOAWAY ENHANCE_YOUR_CALM).
        const n = rng.pick([1, 1, 3, 100, risky(state, 0.5) ? 1200 : 10]);
        return part(
          `${n} PING (${length} bytes${ack ? ", ACK" : ""}) on ${stream}`,
          ...times(n, () =>
            frame(
              FrameType.ping,
              ack ? Flag.ack : 0,
              stream,
              rng.bytes(length),
            ),
          ),
        );
      },
    ],
    [
      2,
      () => {
        const stream = risky(state, 0.3)
          ? 0
          : rng.pick([recent, idle, idle + 10]);
        const length = risky(state, 0.2) ? rng.pick([0, 4, 6]) : 5;
        const payload = Buffer.alloc(length);
        if (length === 5) {
          payload.writeUInt32BE(
            risky(state, 0.3) ? stream : rng.pick([0, recent + 2, idle + 2]),
          );
          payload[4] = rng.int(256);
        }
        return part(
          `PRIORITY on ${stream} (${length} bytes)`,
          frame(FrameType.priority, 0, stream, payload),
        );
      },
    ],
    [
      2,
      () => {
        // On an idle stream or stream 0: a connection error (§6.4).
        const stream = risky(state, 0.6)
          ? rng.pick([0, idle, idle + 10])
          : recent;
        const length = risky(state, 0.15) ? rng.pick([0, 3, 8]) : 4;
        return part(
          `RST_STREAM on ${stream} (${length} bytes)`,
          frame(FrameType.rstStream, 0, stream, rng.bytes(length)),
        );
      },
    ],
    [
      1,
      () => {
        const payload = Buffer.alloc(8 + rng.int(16));
        payload.writeUInt32BE(rng.pick([0, recent, 0x7fff_ffff]));
        payload.writeUInt32BE(
          rng.pick([ErrorCode.noError, ErrorCode.protocolError, 0xffff]),
          4,
        );
        const stream = risky(state, 0.1) ? 1 : 0;
        return part(
          `GOAWAY on ${stream}`,
          frame(
            FrameType.goaway,
            0,
            stream,
            risky(state, 0.1) ? payload.subarray(0, 5) : payload,
          ),
        );
      },
    ],
    [
      h,
      () =>
        part(
          "PUSH_PROMISE from the client",
          frame(
            FrameType.pushPromise,
            Flag.endHeaders,
            recent,
            Buffer.concat([u32(idle + 1), headerBlock(grpcRequestFields())]),
          ),
        ),
    ],
    [
      3,
      () => {
        // Unknown types are ignored, on any stream (§4.1, §5.5).
        const type = rng.between(0x0a, 0xff);
        const stream = rng.pick([0, recent, idle, idle + 1, 0x7fff_ffff]);
        return part(
          `unknown frame type 0x${type.toString(16)} on ${stream}`,
          frame(
            type,
            rng.int(256),
            stream,
            rng.bytes(rng.pick([0, 4, 100, 16_384])),
          ),
        );
      },
    ],
    [
      h,
      () => {
        const stream = rng.pick([0, idle, idle + 1]);
        return part(
          `DATA on ${stream}`,
          frame(
            FrameType.data,
            rng.int(2),
            stream,
            rng.bytes(rng.pick([0, 10, 1000])),
          ),
        );
      },
    ],
    [
      h,
      () =>
        part(
          "CONTINUATION without HEADERS",
          frame(
            FrameType.continuation,
            Flag.endHeaders,
            recent,
            headerBlock([["x", "y"]]),
          ),
        ),
    ],
    [
      2 * h,
      () => {
        const declared = rng.pick([16_385, 65_536, 0xff_ffff]);
        const actual = rng.pick([0, 100, 16_385, 20_000]);
        const out = frame(
          rng.pick([FrameType.data, FrameType.headers, FrameType.ping, 0x20]),
          0,
          rng.pick([0, idle]),
          rng.bytes(actual),
        );
        out.writeUIntBE(declared, 0, 3);
        return part(
          `frame declaring ${declared} bytes, carrying ${actual}`,
          out,
        );
      },
    ],
    [
      2 * h,
      () => {
        const type = rng.int(10);
        const stream = rng.pick([0, recent, idle, idle + 1, 0x7fff_ffff]);
        return part(
          `random frame of type ${type} on ${stream}`,
          frame(
            type,
            rng.int(256),
            stream,
            rng.bytes(rng.pick([0, 1, 5, 8, 9, 40])),
          ),
        );
      },
    ],
    [h, () => part("random octets", rng.bytes(rng.between(1, 300)))],
    [1, () => settingsPart(rng, state)],
    [
      state.rapidResetBursts ? 1 : 0,
      () =>
        part(
          "200 rapid resets (HEADERS, RST_STREAM CANCEL)",
          ...times(200, () => {
            const id = state.nextStreamId;
            state.nextStreamId += 2;
            return Buffer.concat([
              frame(
                FrameType.headers,
                Flag.endHeaders,
                id,
                headerBlock(grpcRequestFields()),
              ),
              frame(FrameType.rstStream, 0, id, u32(ErrorCode.cancel)),
            ]);
          }),
        ),
    ],
  ]);
}

/** Byte- and frame-level damage to one part: bit flips, truncation, rewritten header fields. */
function mutatePart(
  rng: Rng,
  part: ScriptPart,
  state: ScriptState,
): ScriptPart {
  if (part.frames.length === 0) return part;
  const frames = part.frames.map((f) => Buffer.from(f));
  const i = rng.int(frames.length);
  const target = frames[i] ?? Buffer.alloc(0);
  const note = rng.weighted<string>([
    [
      4,
      () => {
        const flips = rng.between(1, 4);
        for (let k = 0; k < flips && target.length > 0; k++) {
          const at = rng.int(target.length);
          target[at] = (target[at] ?? 0) ^ (1 << rng.int(8));
        }
        return `${flips} bit flips in frame ${i}`;
      },
    ],
    [
      2,
      () => {
        const at = rng.int(target.length);
        frames[i] = target.subarray(0, at);
        frames.length = i + 1;
        return `cut at byte ${at} of frame ${i}`;
      },
    ],
    [
      2,
      () => {
        if (target.length < 9) return "no length to change";
        const length = target.readUIntBE(0, 3);
        const changed = rng.chance(0.7)
          ? Math.min(0xff_ffff, Math.max(0, length + rng.between(-3, 3)))
          : rng.int(0x100_0000);
        target.writeUIntBE(changed, 0, 3);
        return `length ${length} -> ${changed} in frame ${i}`;
      },
    ],
    [
      1,
      () => {
        if (target.length < 9) return "no type to change";
        target[3] = rng.int(256);
        return `type -> ${target[3]} in frame ${i}`;
      },
    ],
    [
      2,
      () => {
        if (target.length < 9) return "no flags to change";
        const flags = rng.int(256);
        target[4] = flags;
        return `flags -> 0x${flags.toString(16)} in frame ${i}`;
      },
    ],
    [
      1,
      () => {
        if (target.length < 9) return "no stream to change";
        const id = rng.chance(0.5)
          ? rng.uint32()
          : rng.pick([0, 2, 0x8000_0001, state.nextStreamId]);
        target.writeUInt32BE(id >>> 0, 5);
        return `stream id -> ${id >>> 0} in frame ${i}`;
      },
    ],
    [
      1,
      () => {
        frames.splice(i, 0, Buffer.from(target));
        return `frame ${i} twice`;
      },
    ],
    [
      1,
      () => {
        frames.splice(i, 1);
        return `frame ${i} dropped`;
      },
    ],
  ]);
  return { label: `${part.label} [${note}]`, frames };
}

/** What the client does once its bytes are written. */
export type Ending = "wait" | "half-close" | "abort" | "goaway";

/** Everything one fuzz connection sends, and how. */
export interface ConnectionScript {
  readonly index: number;
  /** 0 (no connection errors meant), 0.5 or 1.5 (see `risky`). */
  readonly hostility: number;
  readonly parts: ScriptPart[];
  /** Cut points of the concatenated bytes: each piece is one socket write. */
  readonly splits: number[];
  /** Wait about a millisecond between writes (else one event-loop turn). */
  readonly slow: boolean;
  readonly ending: Ending;
  readonly raisedMaxFrameSize: boolean;
}

/** The preface and first SETTINGS, usually right, sometimes damaged or absent. */
function openingParts(rng: Rng, state: ScriptState): ScriptPart[] {
  const h = state.hostility;
  const preface = rng.weighted<ScriptPart | undefined>([
    [40, () => ({ label: "preface", frames: [clientPreface] })],
    [
      h,
      () => {
        const bad = Buffer.from(clientPreface);
        const at = rng.int(bad.length);
        bad[at] = (bad[at] ?? 0) ^ (1 << rng.int(8));
        return { label: `preface with a flipped bit at ${at}`, frames: [bad] };
      },
    ],
    [
      h,
      () => ({
        label: "truncated preface",
        frames: [clientPreface.subarray(0, rng.int(clientPreface.length))],
      }),
    ],
    [h, () => undefined],
    [
      h,
      () => ({
        label: "HTTP/1.1 request",
        frames: [
          latin1(
            `${rng.pick(["GET", "POST", "PRI"])} / HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\nConnection: Upgrade, HTTP2-Settings\r\n\r\n`,
          ),
        ],
      }),
    ],
    [
      h,
      () => ({
        label: "TLS ClientHello-like bytes",
        frames: [
          Buffer.concat([
            Buffer.from([0x16, 0x03, 0x01, 0x00, 0xa5, 0x01]),
            rng.bytes(40),
          ]),
        ],
      }),
    ],
  ]);
  const parts: ScriptPart[] = preface !== undefined ? [preface] : [];
  if (!risky(state, 0.1)) {
    parts.push(
      rng.chance(0.7)
        ? {
            label: "SETTINGS (empty)",
            frames: [frame(FrameType.settings, 0, 0, settingsPayload([]))],
          }
        : settingsPart(rng, state),
    );
  }
  return parts;
}

/** The script of connection `index` of a run seeded with `seed`: the same on every call. */
export function connectionScript(
  seed: number,
  index: number,
  options: {
    /**
     * Send bursts of 200 HEADERS + RST_STREAM CANCEL pairs (default true). Off for the node
     * engine: with such bursts on many concurrent connections, Node 24's own node:http2
     * aborts the process in ~Http2Session (`current_nghttp2_memory_ == 0`, nodejs/node#35233
     * family) with or without this service's limits (main at 05aef47 aborts on FUZZ_SEED=13
     * H2_FUZZ_CONNECTION=0-299 every time); see docs/security.md, "Known issues".
     */
    rapidResetBursts?: boolean;
  } = {},
): ConnectionScript {
  const rng = new Rng(connectionSeed(seed, index));
  // Two in five connections only do what must not cost them the connection (so that requests
  // with illegal header octets reach the routes), two in five a little more, one in five a lot.
  const hostility = rng.weighted<number>([
    [2, () => 0],
    [2, () => 0.5],
    [1, () => 1.5],
  ]);
  const state: ScriptState = {
    rng,
    hostility,
    nextStreamId: 1,
    raisedMaxFrameSize: false,
    rapidResetBursts: options.rapidResetBursts ?? true,
  };
  const parts = openingParts(rng, state);
  const count = rng.weighted<number>([
    [3, () => rng.between(1, 3)],
    [2, () => rng.between(4, 8)],
    [1, () => rng.between(9, 20)],
  ]);
  for (let k = 0; k < count; k++) {
    let part = rng.chance(0.65)
      ? requestStream(rng, state)
      : strayPart(rng, state);
    if (risky(state, 0.15)) part = mutatePart(rng, part, state);
    parts.push(part);
  }
  // Damage to the opening, rarer than to the rest.
  if (parts.length > 0 && risky(state, 0.03)) {
    const first = parts[0];
    if (first !== undefined) parts[0] = mutatePart(rng, first, state);
  }
  const total = parts.reduce(
    (n, p) => n + p.frames.reduce((m, f) => m + f.length, 0),
    0,
  );
  const splits = rng.weighted<number[]>([
    [6, () => []],
    [
      3,
      () => Array.from({ length: rng.between(1, 4) }, () => rng.int(total + 1)),
    ],
    [
      1,
      () =>
        total < 2000
          ? Array.from({ length: Math.min(total, 200) }, (_, i) => i + 1)
          : [rng.int(total + 1)],
    ],
  ]);
  return {
    index,
    hostility,
    parts,
    splits: [...new Set(splits)].sort((a, b) => a - b),
    slow: rng.chance(0.1),
    ending: rng.weighted<Ending>([
      [12, () => "wait"],
      [2, () => "half-close"],
      [2, () => "abort"],
      [1, () => "goaway"],
    ]),
    raisedMaxFrameSize: state.raisedMaxFrameSize,
  };
}

/** The bytes of `parts`, cut at `splits` into socket writes. */
export function scriptWrites(
  parts: readonly ScriptPart[],
  splits: readonly number[],
): Buffer[] {
  const bytes = Buffer.concat(parts.flatMap((p) => p.frames));
  const writes: Buffer[] = [];
  let from = 0;
  for (const at of splits) {
    if (at <= from || at >= bytes.length) continue;
    writes.push(bytes.subarray(from, at));
    from = at;
  }
  if (from < bytes.length) writes.push(bytes.subarray(from));
  return writes;
}

/** A readable account of a script, each part with its first bytes in hex (all with `full`). */
export function describeScript(
  script: Pick<
    ConnectionScript,
    "hostility" | "parts" | "splits" | "slow" | "ending"
  >,
  full = false,
): string {
  const lines = script.parts.map((part, k) => {
    const bytes = Buffer.concat(part.frames);
    const shown = full ? bytes : bytes.subarray(0, 48);
    return `  ${k}. ${part.label} — ${bytes.length} bytes: ${shown.toString("hex")}${shown.length < bytes.length ? "…" : ""}`;
  });
  return [
    `  hostility ${script.hostility}`,
    ...lines,
    `  writes cut at [${script.splits.slice(0, 20).join(",")}${script.splits.length > 20 ? ",…" : ""}]${script.slow ? ", 1 ms apart" : ""}; then ${script.ending}`,
  ].join("\n");
}
