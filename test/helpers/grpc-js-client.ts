import { fromBinary, toBinary } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import {
  RateLimitRequestSchema,
  RateLimitResponseSchema,
  type RateLimitRequest,
  type RateLimitResponse,
} from "../../src/proto.js";

/** An independent gRPC client (@grpc/grpc-js) for ShouldRateLimit, using protobuf-es codecs. */
export class GrpcJsRateLimitClient {
  private readonly client: grpc.Client;
  constructor(address: string) {
    this.client = new grpc.Client(address, grpc.credentials.createInsecure());
  }

  /**
   * Calls ShouldRateLimit; rejects with the grpc-js ServiceError (code, details).
   * `timeoutMs`: the call's deadline in ms (none when absent).
   */
  shouldRateLimit(
    request: RateLimitRequest,
    timeoutMs?: number,
  ): Promise<RateLimitResponse> {
    return new Promise((resolve, reject) => {
      this.client.makeUnaryRequest(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        (r: RateLimitRequest) =>
          Buffer.from(toBinary(RateLimitRequestSchema, r)),
        (b: Buffer) => fromBinary(RateLimitResponseSchema, b),
        request,
        timeoutMs === undefined
          ? {}
          : { deadline: new Date(Date.now() + timeoutMs) },
        (err, response) => {
          if (err !== null) reject(err);
          else if (response === undefined) reject(new Error("no response"));
          else resolve(response);
        },
      );
    });
  }

  /** Sends raw bytes as the request message (to test malformed input). */
  raw(bytes: Uint8Array): Promise<RateLimitResponse> {
    return new Promise((resolve, reject) => {
      this.client.makeUnaryRequest(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        (r: Uint8Array) => Buffer.from(r),
        (b: Buffer) => fromBinary(RateLimitResponseSchema, b),
        bytes,
        (err, response) => {
          if (err !== null) reject(err);
          else if (response === undefined) reject(new Error("no response"));
          else resolve(response);
        },
      );
    });
  }

  close(): void {
    this.client.close();
  }
}
