import { connect, type IncomingHttpHeaders } from "node:http2";

/** Everything a raw gRPC call returned. */
export interface RawGrpcResult {
  readonly httpStatus: number;
  readonly headers: IncomingHttpHeaders;
  readonly trailers: IncomingHttpHeaders;
  readonly body: Buffer;
  /** grpc-status from the trailers, or from the headers of a trailers-only response. */
  readonly grpcStatus: number;
  /** Decoded grpc-message. */
  readonly grpcMessage: string;
}

/** Frames one message as a gRPC envelope (`flags length message`). */
export function envelope(message: Uint8Array, flags = 0): Buffer {
  const out = Buffer.alloc(5 + message.length);
  out[0] = flags;
  out.writeUInt32BE(message.length, 1);
  out.set(message, 5);
  return out;
}

/** Sends exact bytes as a unary gRPC call on a fresh HTTP/2 connection and collects the answer. */
export function rawGrpc(
  address: string,
  path: string,
  body: Buffer,
  headers: Record<string, string> = {},
): Promise<RawGrpcResult> {
  return new Promise((resolve, reject) => {
    const session = connect(`http://${address}`);
    session.on("error", reject);
    const stream = session.request({
      ":method": "POST",
      ":path": path,
      "content-type": "application/grpc",
      te: "trailers",
      ...headers,
    });
    let responseHeaders: IncomingHttpHeaders = {};
    let trailers: IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    stream.on("response", (h) => {
      responseHeaders = h;
    });
    stream.on("trailers", (t: IncomingHttpHeaders) => {
      trailers = t;
    });
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("error", reject);
    stream.on("close", () => {
      session.close();
      const source =
        trailers["grpc-status"] !== undefined ? trailers : responseHeaders;
      resolve({
        httpStatus: Number(responseHeaders[":status"]),
        headers: responseHeaders,
        trailers,
        body: Buffer.concat(chunks),
        grpcStatus: Number(source["grpc-status"]),
        grpcMessage: decodeURIComponent(String(source["grpc-message"] ?? "")),
      });
    });
    stream.end(body);
  });
}
