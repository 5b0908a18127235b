// A scripted memcached binary-protocol peer on a loopback port, for the replies real memcached
// cannot be made to produce on demand (lost compare-and-swap races every time, error statuses).
import { createServer, type Socket } from "node:net";

/** One request as the peer received it (memcached `protocol_binary.h` framing). */
export interface McPeerRequest {
  readonly opcode: number;
  readonly opaque: number;
  readonly key: string;
  /** The header's CAS field. */
  readonly cas: bigint;
  readonly extras: Buffer;
  readonly value: Buffer;
}

/** A running peer. */
export interface McPeer {
  /** `127.0.0.1:<port>` */
  readonly address: string;
  /** Every request received so far (NOOPs included), in order. */
  readonly requests: McPeerRequest[];
  /** Closes the listener and every connection. */
  close(): Promise<void>;
}

/** Builds one binary-protocol reply. */
export function mcReply(
  opcode: number,
  opaque: number,
  options: {
    status?: number;
    value?: string;
    cas?: bigint;
    extras?: number;
  } = {},
): Buffer {
  const extras = Buffer.alloc(options.extras ?? 0);
  const value = Buffer.from(options.value ?? "");
  const header = Buffer.alloc(24);
  header[0] = 0x81;
  header[1] = opcode;
  header[4] = extras.length;
  header.writeUInt16BE(options.status ?? 0, 6);
  header.writeUInt32BE(extras.length + value.length, 8);
  header.writeUInt32BE(opaque, 12);
  header.writeBigUInt64BE(options.cas ?? 0n, 16);
  return Buffer.concat([header, extras, value]);
}

/**
 * Starts a peer that answers every NOOP with a NOOP and every other request with what
 * `answer` returns (any number of replies, written in order).
 */
export async function startMcPeer(
  answer: (request: McPeerRequest) => Buffer[],
): Promise<McPeer> {
  const requests: McPeerRequest[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.setNoDelay(true);
    socket.on("close", () => sockets.delete(socket));
    let buffered = Buffer.alloc(0);
    socket.on("data", (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 24) {
        const end = 24 + buffered.readUInt32BE(8);
        if (buffered.length < end) return;
        const frame = buffered.subarray(0, end);
        buffered = buffered.subarray(end);
        const extrasBytes = frame[4]!;
        const keyAt = 24 + extrasBytes;
        const keyEnd = keyAt + frame.readUInt16BE(2);
        const request: McPeerRequest = {
          opcode: frame[1]!,
          opaque: frame.readUInt32BE(12),
          key: frame.toString("utf8", keyAt, keyEnd),
          cas: frame.readBigUInt64BE(16),
          extras: frame.subarray(24, keyAt),
          value: frame.subarray(keyEnd),
        };
        requests.push(request);
        const replies =
          request.opcode === 0x0a
            ? [mcReply(0x0a, request.opaque)]
            : answer(request);
        for (const bytes of replies) socket.write(bytes);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string")
    throw new Error("no port");
  return {
    address: `127.0.0.1:${address.port}`,
    requests,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
