import { create, toBinary, toJsonString } from "@bufbuild/protobuf";
import {
  Code,
  ConnectError,
  createClient,
  type Transport,
} from "@connectrpc/connect";
import {
  createConnectTransport,
  createGrpcTransport,
  createGrpcWebTransport,
} from "@connectrpc/connect-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  RateLimitRequestSchema,
  RateLimitResponse_Code as RlCode,
  RateLimitService,
} from "../../src/proto.js";
import { SettingsError } from "../../src/settings/settings-error.js";
import { loadSettings } from "../../src/settings/settings.js";
import { startTestApp, type TestApp } from "../helpers/rls-app.js";

// The hostile-load bounds of docs/limits.md, at their defaults, on every transport.

const config = `
domain: rl
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 10 }
`;

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp({ "rl.yaml": config });
});
afterAll(async () => {
  await t.stop();
});

type Init = Parameters<typeof create<typeof RateLimitRequestSchema>>[1];

function descriptors(count: number, entries = 1, value = "v") {
  return Array.from({ length: count }, (_, i) => ({
    entries: Array.from({ length: entries }, () => ({
      key: "k",
      value: `${value}${i}`,
    })),
  }));
}

/** Requests one past each bound, and the message each gets. */
const overBound: [string, Init, string][] = [
  [
    "1001 descriptors",
    { domain: "rl", descriptors: descriptors(1001) },
    "descriptors must have at most 1000 items (got 1001)",
  ],
  [
    "101 entries",
    { domain: "rl", descriptors: [...descriptors(1), ...descriptors(1, 101)] },
    "descriptors[1].entries must have at most 100 items (got 101)",
  ],
  [
    "a 65537-byte value",
    {
      domain: "rl",
      descriptors: [
        { entries: [{ key: "user", value: "é".repeat(32768) + "x" }] },
      ],
    },
    "descriptors[0].entries[0].value must be at most 65536 bytes",
  ],
  [
    "a 65537-byte key",
    {
      domain: "rl",
      descriptors: [{ entries: [{ key: "a" }, { key: "k".repeat(65537) }] }],
    },
    "descriptors[0].entries[1].key must be at most 65536 bytes",
  ],
  [
    "hits_addend 2^64 − 1",
    {
      domain: "rl",
      descriptors: [
        { entries: [{ key: "user", value: "u" }], hitsAddend: 2n ** 64n - 1n },
      ],
    },
    "descriptors[0].hits_addend must be at most 9007199254740991 (got 18446744073709551615)",
  ],
];

function transports(): [string, Transport][] {
  return [
    [
      "gRPC (fast path)",
      createGrpcTransport({ baseUrl: `http://${t.addresses.grpc}` }),
    ],
    [
      "gRPC-web",
      createGrpcWebTransport({
        baseUrl: `http://${t.addresses.http}`,
        httpVersion: "1.1",
      }),
    ],
    [
      "Connect",
      createConnectTransport({
        baseUrl: `http://${t.addresses.http}`,
        httpVersion: "1.1",
      }),
    ],
  ];
}

async function callError(
  transport: Transport,
  init: Init,
): Promise<ConnectError> {
  const client = createClient(RateLimitService, transport);
  try {
    await client.shouldRateLimit(create(RateLimitRequestSchema, init));
  } catch (err) {
    return ConnectError.from(err);
  }
  throw new Error("the call succeeded");
}

describe("request bounds", () => {
  it("refuses a request one past each bound with INVALID_ARGUMENT naming the field, on every gRPC transport", async () => {
    for (const [name, transport] of transports()) {
      for (const [what, init, message] of overBound) {
        const err = await callError(transport, init);
        expect([name, what, err.code, err.rawMessage]).toEqual([
          name,
          what,
          Code.InvalidArgument,
          message,
        ]);
      }
    }
  });

  it("refuses the same requests on /json with 400 and a JSON error", async () => {
    for (const [what, init, message] of overBound) {
      const body = toJsonString(
        RateLimitRequestSchema,
        create(RateLimitRequestSchema, init),
      );
      const res = await fetch(`http://${t.addresses.http}/json`, {
        method: "POST",
        body,
      });
      expect([what, res.status, await res.json()]).toEqual([
        what,
        400,
        { code: "invalid_argument", message },
      ]);
    }
  });

  it("accepts a request at every bound and counts 2^53 − 1 hits exactly", async () => {
    const client = createClient(RateLimitService, transports()[0]![1]);
    const atBounds = await client.shouldRateLimit(
      create(RateLimitRequestSchema, {
        domain: "rl",
        descriptors: [
          ...descriptors(998),
          { entries: [{ key: "user", value: "k".repeat(65536) }] },
          {
            entries: Array.from({ length: 100 }, (_, i) => ({
              key: i === 0 ? "é".repeat(32768) : "k",
              value: "",
            })),
          },
        ],
      }),
    );
    expect(atBounds.overallCode).toBe(RlCode.OK);
    const max = await client.shouldRateLimit(
      create(RateLimitRequestSchema, {
        domain: "rl",
        descriptors: [
          {
            entries: [{ key: "user", value: "max" }],
            hitsAddend: BigInt(Number.MAX_SAFE_INTEGER),
          },
        ],
      }),
    );
    expect(max.overallCode).toBe(RlCode.OVER_LIMIT);
    expect(max.statuses[0]?.limitRemaining).toBe(0);
  });

  it("refuses a huge hitsAddend written as a JSON number on /json instead of rounding it", async () => {
    for (const number of ["18446744073709551615", "9007199254740993"]) {
      const res = await fetch(`http://${t.addresses.http}/json`, {
        method: "POST",
        body: `{"domain":"rl","descriptors":[{"entries":[{"key":"user","value":"n"}],"hitsAddend":${number}}]}`,
      });
      expect(res.status).toBe(400);
      const error = (await res.json()) as { code: string; message: string };
      expect(error.code).toBe("invalid_argument");
      expect(error.message).toMatch(/hits_?addend|UInt64Value/i);
    }
  });

  it("refuses messages over 4 MiB with RESOURCE_EXHAUSTED on every gRPC transport, and /json bodies over 1 MiB with 413", async () => {
    const huge: Init = {
      domain: "rl",
      descriptors: [
        { entries: [{ key: "user", value: "x".repeat(4 * 1024 * 1024) }] },
      ],
    };
    for (const [name, transport] of transports()) {
      const err = await callError(transport, huge);
      expect([name, err.code]).toEqual([name, Code.ResourceExhausted]);
    }
    const res = await fetch(`http://${t.addresses.http}/json`, {
      method: "POST",
      body: "x".repeat(1024 * 1024 + 1),
    });
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({
      code: "resource_exhausted",
      message: "request body exceeds 1048576 bytes",
    });
  });

  it("answers an undecodable message with INVALID_ARGUMENT on gRPC-web and Connect too", async () => {
    const garbage = Uint8Array.of(0x0a, 0x05, 0x61);
    const grpcWeb = await fetch(
      `http://${t.addresses.http}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`,
      {
        method: "POST",
        headers: { "content-type": "application/grpc-web+proto" },
        body: Buffer.concat([
          Buffer.from([0, 0, 0, 0, garbage.length]),
          garbage,
        ]),
      },
    );
    const trailer = Buffer.from(await grpcWeb.arrayBuffer());
    expect(trailer[0]).toBe(0x80);
    expect(trailer.subarray(5).toString()).toMatch(
      /^grpc-message: parse%20binary.*\r\ngrpc-status: 3\r\n$/s,
    );
    const connectProto = await fetch(
      `http://${t.addresses.http}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`,
      {
        method: "POST",
        headers: { "content-type": "application/proto" },
        body: garbage,
      },
    );
    expect(connectProto.status).toBe(400);
    const error = (await connectProto.json()) as {
      code: string;
      message: string;
    };
    expect(error.code).toBe("invalid_argument");
    expect(error.message).toMatch(/^parse binary: /);
  });
});

describe("request bound settings", () => {
  it("parse from the environment, refuse values below 1, and take effect", async () => {
    const { settings } = loadSettings({});
    expect([
      settings.requestMaxGrpcBytes,
      settings.requestMaxJsonBytes,
      settings.requestMaxDescriptors,
      settings.requestMaxEntries,
      settings.requestMaxEntryBytes,
    ]).toEqual([4194304, 1048576, 1000, 100, 65536]);
    expect(() => loadSettings({ REQUEST_MAX_DESCRIPTORS: "0" })).toThrow(
      SettingsError,
    );
    expect(() =>
      loadSettings({ REQUEST_MAX_GRPC_BYTES: "4294967296" }),
    ).toThrow(SettingsError);
    const small = await startTestApp(
      { "rl.yaml": config },
      {
        REQUEST_MAX_DESCRIPTORS: "2",
        REQUEST_MAX_ENTRIES: "2",
        REQUEST_MAX_ENTRY_BYTES: "4",
        REQUEST_MAX_GRPC_BYTES: "100",
        REQUEST_MAX_JSON_BYTES: "100",
      },
    );
    try {
      const grpc = createGrpcTransport({
        baseUrl: `http://${small.addresses.grpc}`,
      });
      const cases: [Init, Code, string][] = [
        [
          { domain: "rl", descriptors: descriptors(3) },
          Code.InvalidArgument,
          "descriptors must have at most 2 items (got 3)",
        ],
        [
          { domain: "rl", descriptors: descriptors(1, 3) },
          Code.InvalidArgument,
          "descriptors[0].entries must have at most 2 items (got 3)",
        ],
        [
          { domain: "rl", descriptors: descriptors(1, 1, "long") },
          Code.InvalidArgument,
          "descriptors[0].entries[0].value must be at most 4 bytes",
        ],
        [
          { domain: "rl", descriptors: descriptors(1, 1, "x".repeat(100)) },
          Code.ResourceExhausted,
          "",
        ],
      ];
      for (const [init, code, message] of cases) {
        const err = await callError(grpc, init);
        expect(err.code).toBe(code);
        if (message !== "") expect(err.rawMessage).toBe(message);
      }
      const ok = await createClient(RateLimitService, grpc).shouldRateLimit(
        create(RateLimitRequestSchema, {
          domain: "rl",
          descriptors: descriptors(2, 2),
        }),
      );
      expect(ok.overallCode).toBe(RlCode.OK);
      const res = await fetch(`http://${small.addresses.http}/json`, {
        method: "POST",
        body: " ".repeat(101),
      });
      expect(res.status).toBe(413);
    } finally {
      await small.stop();
    }
  });
});

describe("early answers on HTTP/1.1", () => {
  it("close the connection when the request body was not read to its end, so the next request does not hit a reset", async () => {
    const url = `http://${t.addresses.http}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`;
    const message = toBinary(
      RateLimitRequestSchema,
      create(RateLimitRequestSchema, {
        domain: "rl",
        descriptors: descriptors(1),
      }),
    );
    const frame = (m: Uint8Array): Buffer => {
      const header = Buffer.alloc(5);
      header.writeUInt32BE(m.length, 1);
      return Buffer.concat([header, m]);
    };
    // Two messages for a unary method, the second one large: answered after the first.
    const early = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/grpc-web+proto" },
      body: Buffer.concat([frame(message), frame(Buffer.alloc(200_000, 0x20))]),
    });
    const trailer = Buffer.from(await early.arrayBuffer()).toString();
    expect(trailer).toContain("grpc-status: 12");
    expect(early.headers.get("connection")).toBe("close");
    for (let i = 0; i < 3; i++) {
      const next = await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/proto" },
        body: message,
      });
      expect(next.status).toBe(200);
      expect(next.headers.get("connection")).toBe("keep-alive");
      await next.arrayBuffer();
    }
  });
});
