import {
  connect,
  sensitiveHeaders,
  type OutgoingHttpHeaders,
} from "node:http2";
import { createServer, type AddressInfo, type Server } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { HpackDecoder } from "../../src/http2/hpack.js";

// Cross-check of our HPACK decoder against a real encoder: node:http2's client (nghttp2) sends
// Huffman-coded, dynamically indexed request headers. A plain TCP server captures the raw HEADERS
// block fragments of several requests on one connection; decoding them in order must give back
// what the client sent.

const preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const frameHeaderBytes = 9;
const frameType = { headers: 0x1, settings: 0x4, continuation: 0x9 } as const;
const flags = { ack: 0x1, endHeaders: 0x4, padded: 0x8, priority: 0x20 };

let server: Server | undefined;

afterEach(async () => {
  const closing = server;
  server = undefined;
  if (closing !== undefined) {
    await new Promise<void>((resolve) => {
      closing.close(() => {
        resolve();
      });
    });
  }
});

/**
 * Sends `requests` on one node:http2 client connection and returns the header block of each, as
 * the raw bytes of its HEADERS (+ CONTINUATION) frames.
 */
async function captureHeaderBlocks(
  requests: readonly OutgoingHttpHeaders[],
): Promise<{ blocks: Buffer[]; authority: string }> {
  const blocks: Buffer[] = [];
  let resolveDone: () => void = () => undefined;
  const done = new Promise<void>((resolve) => {
    resolveDone = resolve;
  });
  server = createServer((socket) => {
    // Our SETTINGS (empty: protocol defaults, so a 4096-byte table).
    socket.write(Buffer.from([0, 0, 0, frameType.settings, 0, 0, 0, 0, 0]));
    let received = Buffer.alloc(0);
    let offset = preface.length;
    let pending: Buffer[] = [];
    socket.on("data", (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      while (received.length >= offset + frameHeaderBytes) {
        const length = received.readUIntBE(offset, 3);
        const type = received[offset + 3];
        const frameFlags = received[offset + 4] ?? 0;
        const start = offset + frameHeaderBytes;
        if (received.length < start + length) break;
        let payload = received.subarray(start, start + length);
        offset = start + length;
        if (type === frameType.settings && (frameFlags & flags.ack) === 0) {
          socket.write(
            Buffer.from([0, 0, 0, frameType.settings, flags.ack, 0, 0, 0, 0]),
          );
        }
        if (type !== frameType.headers && type !== frameType.continuation) {
          continue;
        }
        if (type === frameType.headers) {
          if ((frameFlags & flags.padded) !== 0) {
            const padLength = payload[0] ?? 0;
            payload = payload.subarray(1, payload.length - padLength);
          }
          if ((frameFlags & flags.priority) !== 0)
            payload = payload.subarray(5);
        }
        pending.push(payload);
        if ((frameFlags & flags.endHeaders) !== 0) {
          blocks.push(Buffer.concat(pending));
          pending = [];
          if (blocks.length === requests.length) resolveDone();
        }
      }
    });
    // The client is destroyed mid-request at the end; a reset is expected.
    socket.on("error", () => undefined);
  });
  const listening = server;
  await new Promise<void>((resolve) =>
    listening.listen(0, "127.0.0.1", resolve),
  );
  const { port } = listening.address() as AddressInfo;
  const authority = `127.0.0.1:${port}`;
  const session = connect(`http://${authority}`);
  session.on("error", () => undefined); // torn down below without answers
  for (const headers of requests) {
    const stream = session.request(headers, { endStream: true });
    stream.on("error", () => undefined); // never answered: destroyed with the session
  }
  await done;
  session.destroy();
  return { blocks, authority };
}

function envoyRequest(requestId: string): OutgoingHttpHeaders {
  return {
    ":method": "POST",
    ":path": "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    "content-type": "application/grpc",
    te: "trailers",
    "grpc-timeout": "20m",
    "x-envoy-internal": "true",
    "x-forwarded-for": "127.0.0.1",
    "x-request-id": requestId,
    "x-envoy-expected-rq-timeout-ms": "20",
  };
}

/** What the decoder must yield for `headers` sent by node:http2 to `authority`. */
function expectedFields(
  headers: OutgoingHttpHeaders,
  authority: string,
): Record<string, string> {
  const expected: Record<string, string> = {
    ":scheme": "http",
    ":authority": authority,
  };
  for (const [name, value] of Object.entries(headers)) {
    expected[name] = String(value);
  }
  return expected;
}

function toRecord(fields: readonly string[]): Record<string, string> {
  const record: Record<string, string> = {};
  for (let i = 0; i < fields.length; i += 2) {
    record[fields[i] ?? ""] = fields[i + 1] ?? "";
  }
  return record;
}

describe("HpackDecoder against node:http2's encoder", () => {
  it("decodes Envoy-like requests on one connection, reusing the dynamic table", async () => {
    const requests = [
      "9d4b1d49-6c52-4fb2-a6b5-1f0a6b1c2d3e",
      "0b6a3f9e-2f4d-4e6c-9a0b-7c8d9e0f1a2b",
      "5f2e1d0c-3b4a-4968-8776-a5b4c3d2e1f0",
      "e1f2a3b4-c5d6-4e7f-8091-a2b3c4d5e6f7",
    ].map(envoyRequest);
    const { blocks, authority } = await captureHeaderBlocks(requests);

    const decoder = new HpackDecoder();
    expect(blocks).toHaveLength(requests.length);
    blocks.forEach((block, i) => {
      const fields = decoder.decode(block, 0, block.length, 65536);
      expect(toRecord(fields)).toEqual(
        expectedFields(requests[i] ?? {}, authority),
      );
      // Pseudo-header fields come first (RFC 7540 §8.1.2.1).
      const names = fields.filter((_, j) => j % 2 === 0);
      const firstRegular = names.findIndex((name) => !name.startsWith(":"));
      expect(names.slice(firstRegular).some((n) => n.startsWith(":"))).toBe(
        false,
      );
    });
    // The later requests are mostly table references: the test really exercises the table.
    const [first, ...rest] = blocks;
    for (const block of rest) {
      expect(block.length).toBeLessThan((first?.length ?? 0) / 2);
    }
  });

  it("decodes never-indexed, long, latin1 and many distinct headers across requests", async () => {
    const requests: OutgoingHttpHeaders[] = [];
    for (let i = 0; i < 12; i++) {
      requests.push({
        ":method": "POST",
        ":path": `/svc/Method${i}`,
        authorization: `Bearer token-${i}`,
        [sensitiveHeaders]: ["authorization"],
        "x-long": `${"abcdefghij".repeat(30)}-${i}`,
        [`x-custom-${i % 5}`]: `value-${i}`,
        "user-agent": "grpc-node/1.0",
        // node:http2 sends string values as latin1 octets.
        "x-latin1": `caf\u00e9 ${i % 3}`,
      });
    }
    const { blocks, authority } = await captureHeaderBlocks(requests);

    // Each request adds a new x-long entry (~340 bytes) to the client's 4096-byte table, so the
    // table evicts along the way on both sides.
    const decoder = new HpackDecoder();
    blocks.forEach((block, i) => {
      const expected = expectedFields(requests[i] ?? {}, authority);
      expect(toRecord(decoder.decode(block, 0, block.length, 65536))).toEqual(
        expected,
      );
    });
  });
});
