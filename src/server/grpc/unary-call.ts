import { Code, ConnectError } from "@connectrpc/connect";
import type { RateLimitRequest, RateLimitResponse } from "../../proto.js";
import type {
  RequestHeaders,
  ShouldRateLimitHandler,
} from "../should-rate-limit-handler.js";
import { decodeUnaryEnvelope, parseGrpcTimeoutMs } from "./envelope.js";
import { encodeRateLimitResponseFrame } from "./rate-limit-response-encoder.js";
import { maxTimerDelayMs } from "../../util/timer-range.js";

// The state machine of one unary gRPC ShouldRateLimit call served inline, without the Connect
// router: `grpc-timeout` deadline, body collection within `readMaxBytes`, envelope decoding,
// the decision, and one answer (a message with OK trailers, or a trailers-only error). The
// built-in engine subclasses it with how it responds on its stream (grpc-unary.ts); the node
// engine has no inline path. The codes and messages match what the Connect router answers
// for the same request (test/integration/fast-path-equivalence.test.ts).

/** The method the inline path serves. */
export const shouldRateLimitPath =
  "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/** Request content types the inline path serves (the protobuf codec, named or implied). */
export const grpcContentTypes = [
  "application/grpc",
  "application/grpc+proto",
] as const;

/** What a {@link UnaryCall} needs of its engine's options. */
export interface UnaryCallOptions {
  /** The shared ShouldRateLimit entry point (the Connect router calls the same one). */
  readonly handler: ShouldRateLimitHandler;
  /** Largest accepted request message, in bytes (gRPC default 4 MiB). */
  readonly readMaxBytes: number;
}

const emptyBody = Buffer.alloc(0);

/**
 * One unary call: one object per call, whose methods live on the (shared) prototypes, so a
 * call allocates no closures; the engine's subclass says how to answer on its stream.
 *
 * Every answer goes through {@link fail} or {@link succeed}, which answer at most once and
 * not at all once the stream is gone. An exception while answering is a bug: it is handed to
 * {@link contain} (the engine closes the connection) and never reaches the process.
 */
export abstract class UnaryCall<O extends UnaryCallOptions = UnaryCallOptions> {
  /** The engine's options (handler, `readMaxBytes`, …). */
  readonly options: O;
  /** The request's headers, read only for trace context (by the handler, when tracing). */
  readonly headers: RequestHeaders;
  /** An answer was sent, or there is nobody left to answer: nothing more is sent. */
  answered = false;
  /** The `grpc-timeout` timer, if any. */
  deadline: NodeJS.Timeout | undefined = undefined;
  /** The `grpc-timeout` deadline on the `performance.now()` clock (ms), if any. */
  deadlineAtMs: number | undefined = undefined;
  /** The first chunk of the body; later ones (rare: large requests) go to `more`. */
  first: Buffer | undefined = undefined;
  more: Buffer[] | undefined = undefined;
  /** Body bytes received, in bytes. */
  received = 0;

  constructor(options: O, headers: RequestHeaders) {
    this.options = options;
    this.headers = headers;
  }

  /** Whether the stream is closed or destroyed (nothing can be sent on it). */
  protected abstract isGone(): boolean;

  /** Sends a trailers-only response: status 200, content type, `grpc-status`, `grpc-message`. */
  protected abstract respondError(code: Code, message: string): void;

  /** Sends the response headers, `frame` (one enveloped message) and OK trailers. */
  protected abstract respondMessage(frame: Buffer): void;

  /** Contains an exception thrown while answering: the engine closes the connection. */
  protected abstract contain(err: unknown): void;

  /** The decision starts (the built-in engine holds the stream's concurrency slot). */
  protected beginWork(): void {
    // Nothing to hold by default.
  }

  /** The decision is done, answered or not. */
  protected endWork(): void {
    // Nothing to release by default.
  }

  /**
   * Arms the deadline of a `grpc-timeout` header value, if there is one.
   *
   * @returns false when the value is malformed: the call was answered INVALID_ARGUMENT
   */
  startDeadline(value: string | string[] | undefined): boolean {
    const timeoutMs = parseGrpcTimeoutMs(value);
    if (timeoutMs === undefined) return true;
    if (Number.isNaN(timeoutMs)) {
      this.fail(
        Code.InvalidArgument,
        `protocol error: invalid grpc timeout value: ${String(value)}`,
      );
      return false;
    }
    // Whole milliseconds: Node keeps one timer list per distinct delay, and a Go client sends
    // its time left to the microsecond (`9999982u`), so an exact delay would create and drop
    // a list (and a libuv timer) on every call: 4 µs per call at 2,000/s, against 0.1 µs for
    // a delay that repeats (docs/performance.md#round-4-timer-lists). Up to 1 ms late.
    // A deadline beyond what a Node timer holds (`99999999H` is 11,000 years) arms none: Node
    // would fire it after 1 ms.
    if (timeoutMs <= maxTimerDelayMs)
      this.deadline = setTimeout(onDeadline, Math.ceil(timeoutMs), this);
    this.deadlineAtMs = performance.now() + timeoutMs;
    return true;
  }

  /**
   * Takes a chunk of the request body (kept, not copied). Past `readMaxBytes` (plus the
   * envelope prefix) the call is answered RESOURCE_EXHAUSTED.
   *
   * @returns whether the chunk was kept (false once answered)
   */
  receive(chunk: Buffer): boolean {
    if (this.answered) return false;
    this.received += chunk.length;
    const maxBytes = this.options.readMaxBytes;
    if (this.received > maxBytes + 5) {
      try {
        this.fail(
          Code.ResourceExhausted,
          `message size is larger than configured readMaxBytes ${maxBytes}`,
        );
      } catch (err) {
        this.contain(err);
      }
      return false;
    }
    if (this.first === undefined) this.first = chunk;
    else (this.more ??= [this.first]).push(chunk);
    return true;
  }

  /**
   * The request is complete: decodes the envelope (answering its error if it is malformed)
   * and starts the decision, answered when it settles.
   *
   * @throws what the handler throws synchronously instead of rejecting (a bug: the engine's
   *   caller contains it by closing the connection)
   */
  end(): void {
    if (this.answered) return;
    let request: RateLimitRequest;
    try {
      request = decodeUnaryEnvelope(
        this.more !== undefined
          ? Buffer.concat(this.more)
          : (this.first ?? emptyBody),
        this.options.readMaxBytes,
      );
    } catch (err) {
      const e = ConnectError.from(err);
      this.fail(e.code, e.rawMessage);
      return;
    }
    this.first = undefined;
    this.more = undefined;
    const decision = this.options.handler(
      request,
      this.headers,
      this.deadlineAtMs,
    );
    this.beginWork();
    void this.answer(decision);
  }

  /** The client cancelled or the connection went away: there is nobody to answer. */
  abort(): void {
    this.answered = true;
    clearTimeout(this.deadline);
  }

  /** The deadline passed: answers DEADLINE_EXCEEDED (unless answered). */
  expire(): void {
    try {
      this.fail(Code.DeadlineExceeded, "the operation timed out");
    } catch (err) {
      this.contain(err);
    }
  }

  /** Answers with a trailers-only error response (status in the only header block), once. */
  fail(code: Code, message: string): void {
    if (this.answered) return;
    this.answered = true;
    clearTimeout(this.deadline);
    if (this.isGone()) return;
    this.respondError(code, message);
  }

  /** Answers with one response message and OK trailers, once. */
  succeed(frame: Buffer): void {
    if (this.answered) return;
    this.answered = true;
    clearTimeout(this.deadline);
    if (this.isGone()) return;
    this.respondMessage(frame);
  }

  /**
   * Answers with the decision once it settles; `async` rather than `.then` callbacks: no
   * closures per call. Never rejects: an exception while answering (a bug) is contained by
   * the engine.
   */
  private async answer(decision: Promise<RateLimitResponse>): Promise<void> {
    try {
      let frame: Buffer;
      try {
        frame = encodeRateLimitResponseFrame(await decision);
      } catch (err) {
        this.endWork();
        const e = ConnectError.from(err);
        this.fail(e.code, e.rawMessage);
        return;
      }
      this.endWork();
      this.succeed(frame);
    } catch (err) {
      this.endWork();
      this.contain(err);
    }
  }
}

function onDeadline(call: UnaryCall): void {
  call.expire();
}
