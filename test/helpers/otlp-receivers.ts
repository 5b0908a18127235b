import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { BinaryReader, type WireType } from "@bufbuild/protobuf/wire";
import * as grpc from "@grpc/grpc-js";

// Minimal OTLP trace receivers for tests: OTLP/HTTP (POST /v1/traces, JSON or protobuf) and
// OTLP/gRPC (TraceService/Export), both decoding just the fields the tests check.

/** An attribute value as the tests compare it (int64 values become numbers). */
export type AttributeValue = string | number | boolean;

/** One received span with its scope and resource. */
export interface ReceivedSpan {
  /** Lower-case hex, 32 digits. */
  readonly traceId: string;
  /** Lower-case hex, 16 digits. */
  readonly spanId: string;
  /** Lower-case hex, or "" for a root span. */
  readonly parentSpanId: string;
  readonly name: string;
  /** OTLP span kind: 1 internal, 2 server, 3 client. */
  readonly kind: number;
  readonly attributes: Readonly<Record<string, AttributeValue>>;
  /** OTLP status: code 0 unset, 1 ok, 2 error. */
  readonly status: { readonly code: number; readonly message: string };
  /** Instrumentation scope (tracer) name. */
  readonly scope: string;
  readonly resource: Readonly<Record<string, AttributeValue>>;
}

/** A running receiver. */
export interface OtlpReceiver {
  /** Base endpoint: `http://127.0.0.1:<port>`. */
  readonly endpoint: string;
  /** Every span received so far, in arrival order. */
  readonly spans: ReceivedSpan[];
  /** Export requests received so far (each may hold several spans). */
  requests(): number;
  /** Content types of the requests received (OTLP/HTTP only). */
  readonly contentTypes: string[];
  close(): Promise<void>;
}

// --- protobuf (opentelemetry/proto/collector/trace/v1 ExportTraceServiceRequest) ------------

const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString("hex");

/** Calls `field` for each field of the message in `bytes`; skips what it does not consume. */
function eachField(
  bytes: Uint8Array,
  field: (no: number, reader: BinaryReader, type: WireType) => boolean,
): void {
  const reader = new BinaryReader(bytes);
  while (reader.pos < reader.len) {
    const [no, type] = reader.tag();
    if (!field(no, reader, type)) reader.skip(type, no);
  }
}

function decodeAnyValue(bytes: Uint8Array): AttributeValue {
  let value: AttributeValue = "";
  eachField(bytes, (no, r) => {
    if (no === 1) value = r.string();
    else if (no === 2) value = r.bool();
    else if (no === 3) value = Number(r.int64());
    else if (no === 4) value = r.double();
    else return false;
    return true;
  });
  return value;
}

function decodeAttributes(list: Uint8Array[]): Record<string, AttributeValue> {
  const out: Record<string, AttributeValue> = {};
  for (const kv of list) {
    let key = "";
    let value: AttributeValue = "";
    eachField(kv, (no, r) => {
      if (no === 1) key = r.string();
      else if (no === 2) value = decodeAnyValue(r.bytes());
      else return false;
      return true;
    });
    out[key] = value;
  }
  return out;
}

function decodeSpan(
  bytes: Uint8Array,
  scope: string,
  resource: Record<string, AttributeValue>,
): ReceivedSpan {
  let traceId = "";
  let spanId = "";
  let parentSpanId = "";
  let name = "";
  let kind = 0;
  const attributes: Uint8Array[] = [];
  const status = { code: 0, message: "" };
  eachField(bytes, (no, r) => {
    if (no === 1) traceId = hex(r.bytes());
    else if (no === 2) spanId = hex(r.bytes());
    else if (no === 4) parentSpanId = hex(r.bytes());
    else if (no === 5) name = r.string();
    else if (no === 6) kind = r.int32();
    else if (no === 9) attributes.push(r.bytes());
    else if (no === 15) {
      eachField(r.bytes(), (sno, sr) => {
        if (sno === 2) status.message = sr.string();
        else if (sno === 3) status.code = sr.int32();
        else return false;
        return true;
      });
    } else return false;
    return true;
  });
  return {
    traceId,
    spanId,
    parentSpanId,
    name,
    kind,
    attributes: decodeAttributes(attributes),
    status,
    scope,
    resource,
  };
}

/** Decodes the spans of a protobuf `ExportTraceServiceRequest`. */
export function decodeExportRequest(bytes: Uint8Array): ReceivedSpan[] {
  const spans: ReceivedSpan[] = [];
  eachField(bytes, (no, r) => {
    if (no !== 1) return false;
    // ResourceSpans: 1 resource, 2 scope_spans.
    const resourceAttributes: Uint8Array[] = [];
    const scopeSpans: Uint8Array[] = [];
    eachField(r.bytes(), (rno, rr) => {
      if (rno === 1) {
        eachField(rr.bytes(), (ano, ar) => {
          if (ano !== 1) return false;
          resourceAttributes.push(ar.bytes());
          return true;
        });
      } else if (rno === 2) scopeSpans.push(rr.bytes());
      else return false;
      return true;
    });
    const resource = decodeAttributes(resourceAttributes);
    for (const ss of scopeSpans) {
      // ScopeSpans: 1 scope (1 name), 2 spans.
      let scope = "";
      const rawSpans: Uint8Array[] = [];
      eachField(ss, (sno, sr) => {
        if (sno === 1) {
          eachField(sr.bytes(), (ino, ir) => {
            if (ino !== 1) return false;
            scope = ir.string();
            return true;
          });
        } else if (sno === 2) rawSpans.push(sr.bytes());
        else return false;
        return true;
      });
      for (const s of rawSpans) spans.push(decodeSpan(s, scope, resource));
    }
    return true;
  });
  return spans;
}

// --- OTLP/JSON ------------------------------------------------------------------------------

interface JsonKeyValue {
  key: string;
  value: {
    stringValue?: string;
    boolValue?: boolean;
    intValue?: number | string;
    doubleValue?: number;
  };
}
interface JsonExportRequest {
  resourceSpans?: {
    resource?: { attributes?: JsonKeyValue[] };
    scopeSpans?: {
      scope?: { name?: string };
      spans?: {
        traceId: string;
        spanId: string;
        parentSpanId?: string;
        name: string;
        kind: number;
        attributes?: JsonKeyValue[];
        status?: { code?: number; message?: string };
      }[];
    }[];
  }[];
}

function jsonAttributes(
  list: JsonKeyValue[] | undefined,
): Record<string, AttributeValue> {
  const out: Record<string, AttributeValue> = {};
  for (const { key, value } of list ?? []) {
    out[key] =
      value.stringValue ??
      value.boolValue ??
      (value.intValue !== undefined
        ? Number(value.intValue)
        : (value.doubleValue ?? ""));
  }
  return out;
}

/**
 * Decodes the spans of an OTLP/JSON `ExportTraceServiceRequest` (ids in hex, as the OTLP
 * JSON mapping requires).
 */
export function decodeJsonExportRequest(text: string): ReceivedSpan[] {
  const request = JSON.parse(text) as JsonExportRequest;
  const spans: ReceivedSpan[] = [];
  for (const rs of request.resourceSpans ?? []) {
    const resource = jsonAttributes(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        spans.push({
          traceId: s.traceId.toLowerCase(),
          spanId: s.spanId.toLowerCase(),
          parentSpanId: (s.parentSpanId ?? "").toLowerCase(),
          name: s.name,
          kind: s.kind,
          attributes: jsonAttributes(s.attributes),
          status: {
            code: s.status?.code ?? 0,
            message: s.status?.message ?? "",
          },
          scope: ss.scope?.name ?? "",
          resource,
        });
      }
    }
  }
  return spans;
}

// --- receivers ------------------------------------------------------------------------------

function readBody(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      resolve(Buffer.concat(chunks));
    });
    req.on("error", reject);
  });
}

/**
 * Starts an OTLP/HTTP receiver on a free loopback port: `POST /v1/traces` with
 * `application/json` or `application/x-protobuf` bodies; answers an empty success.
 */
export async function startOtlpHttpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const contentTypes: string[] = [];
  let requests = 0;
  const server = createServer((req, res) => {
    void readBody(req).then((body) => {
      const type = req.headers["content-type"] ?? "";
      if (req.method !== "POST" || req.url !== "/v1/traces") {
        res.writeHead(404).end();
        return;
      }
      requests++;
      contentTypes.push(type);
      if (type.startsWith("application/json")) {
        spans.push(...decodeJsonExportRequest(body.toString("utf8")));
        res.writeHead(200, { "content-type": "application/json" }).end("{}");
      } else {
        spans.push(...decodeExportRequest(body));
        res
          .writeHead(200, { "content-type": "application/x-protobuf" })
          .end(Buffer.alloc(0));
      }
    });
  });
  await new Promise<void>((resolve) => {
    server.listen(0, "127.0.0.1", resolve);
  });
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    spans,
    contentTypes,
    requests: () => requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => {
          resolve();
        });
      }),
  };
}

/**
 * Starts an OTLP/gRPC receiver (cleartext HTTP/2) on a free loopback port implementing
 * `opentelemetry.proto.collector.trace.v1.TraceService/Export` with raw-bytes codecs.
 */
export async function startOtlpGrpcReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  let requests = 0;
  const server = new grpc.Server();
  const raw = (b: Buffer): Buffer => b;
  server.addService(
    {
      Export: {
        path: "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        requestStream: false,
        responseStream: false,
        requestSerialize: raw,
        requestDeserialize: raw,
        responseSerialize: raw,
        responseDeserialize: raw,
      },
    },
    {
      Export: (
        call: grpc.ServerUnaryCall<Buffer, Buffer>,
        callback: grpc.sendUnaryData<Buffer>,
      ) => {
        requests++;
        spans.push(...decodeExportRequest(call.request));
        // An empty ExportTraceServiceResponse: full success.
        callback(null, Buffer.alloc(0));
      },
    },
  );
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(
      "127.0.0.1:0",
      grpc.ServerCredentials.createInsecure(),
      (err, p) => {
        if (err !== null) reject(err);
        else resolve(p);
      },
    );
  });
  return {
    endpoint: `http://127.0.0.1:${port}`,
    spans,
    contentTypes: [],
    requests: () => requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.tryShutdown(() => {
          resolve();
        });
        setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, 1000).unref();
      }),
  };
}
