import type { IncomingMessage, ServerResponse } from "node:http";
import { fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import type { Logger } from "pino";
import { ExplainRequestSchema, ExplainResponseSchema } from "../proto.js";
import { connectErrorOf, RequestError } from "../service/errors.js";
import { readBoundedBody, sendJson } from "../server/read-body.js";
import {
  explainDisabledMessage,
  type BucketExplainHandlers,
  type ExplainHandler,
} from "../server/routes.js";
import type { BucketExplainService } from "./bucket-explanation.js";
import type { ExplainService } from "./explain-service.js";

/**
 * Returns the Explain entry point shared by the Connect routes and `/explain`: the service
 * call with its errors mapped to Connect codes by ShouldRateLimit's mapping
 * ({@link connectErrorOf}), uncounted: Explain moves no statistic.
 */
export function createExplainHandler(
  service: ExplainService,
  logger: Logger,
): ExplainHandler {
  return async (request) => {
    try {
      return await service.explain(request);
    } catch (err) {
      throw explainError(err, logger);
    }
  };
}

/** Maps an Explain failure as {@link createExplainHandler} does. */
function explainError(err: unknown, logger: Logger): ConnectError {
  const mapped = connectErrorOf(err, logger);
  // Explain's INTERNAL answers keep their own prefix (the text clients have seen).
  if (mapped.code !== Code.Internal || err instanceof ConnectError)
    return mapped;
  return new ConnectError(
    `internal error: ${err instanceof Error ? err.message : String(err)}`,
    Code.Internal,
  );
}

/**
 * Returns the `ExplainBucket` and `ListBuckets` entry points: the bucket service's calls with
 * their errors mapped as {@link createExplainHandler} maps Explain's (INVALID_ARGUMENT without
 * a domain or bucket entry, UNAVAILABLE before the first config), uncounted.
 */
export function createBucketExplainHandlers(
  service: BucketExplainService,
  logger: Logger,
): BucketExplainHandlers {
  return {
    async explainBucket(request) {
      try {
        return await service.explainBucket(request);
      } catch (err) {
        throw explainError(err, logger);
      }
    },
    async listBuckets(request) {
      try {
        return await service.listBuckets(request);
      } catch (err) {
        throw explainError(err, logger);
      }
    },
  };
}

const httpStatusByCode: Partial<Record<Code, number>> = {
  [Code.InvalidArgument]: 400,
  [Code.Unavailable]: 503,
  [Code.ResourceExhausted]: 413,
  [Code.NotFound]: 404,
  [Code.Unimplemented]: 404,
};
const codeWord = (code: Code): string =>
  Code[code].replace(/([a-z])([A-Z])/g, "$1_$2").toLowerCase();
const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Options of {@link createExplainJsonHandler}. */
export interface ExplainJsonHandlerOptions {
  /** The Explain entry point; undefined while `EXPLAIN_ENABLED` is off (404 then). */
  readonly explain: ExplainHandler | undefined;
  /** Largest accepted request body, in bytes; larger bodies get 413. @defaultValue 1 MiB */
  readonly maxBodyBytes?: number;
}

/**
 * Returns the `POST /explain` handler, the proto3 JSON twin of `/json`: an `ExplainRequest`
 * in (`{"request": {<RateLimitRequest>}, "charge": false}`), an `ExplainResponse` out with 200
 * whatever the decision (the explanation succeeded). Errors answer
 * `{"code": "<connect code>", "message": "..."}`: 400 (bad input, same texts as
 * ShouldRateLimit), 404 while Explain is disabled (the message names `EXPLAIN_ENABLED`), 413,
 * 503 (no config / backend down) or 500.
 */
export function createExplainJsonHandler(
  options: ExplainJsonHandlerOptions,
): (req: IncomingMessage, res: ServerResponse) => void {
  const { explain } = options;
  const maxBodyBytes = options.maxBodyBytes ?? 1024 * 1024;

  function sendError(res: ServerResponse, err: ConnectError): void {
    sendJson(
      res,
      httpStatusByCode[err.code] ?? 500,
      JSON.stringify({ code: codeWord(err.code), message: err.rawMessage }),
    );
  }

  async function handle(
    handler: ExplainHandler,
    body: Buffer,
    res: ServerResponse,
  ): Promise<void> {
    try {
      let json: JsonValue;
      try {
        json = JSON.parse(utf8.decode(body)) as JsonValue;
      } catch (err) {
        throw new RequestError(
          body.length === 0
            ? "request body must be a JSON ExplainRequest, got an empty body"
            : `request body is not valid JSON: ${(err as Error).message}`,
        );
      }
      let request;
      try {
        request = fromJson(ExplainRequestSchema, json);
      } catch (err) {
        throw new RequestError((err as Error).message);
      }
      const response = await handler(request);
      sendJson(
        res,
        200,
        JSON.stringify(toJson(ExplainResponseSchema, response)),
      );
    } catch (err) {
      sendError(
        res,
        err instanceof RequestError
          ? new ConnectError(err.message, Code.InvalidArgument)
          : ConnectError.from(err),
      );
    }
  }

  return (req, res) => {
    if (explain === undefined) {
      req.resume();
      sendError(res, new ConnectError(explainDisabledMessage, Code.NotFound));
      return;
    }
    readBoundedBody(
      req,
      maxBodyBytes,
      (body) => void handle(explain, body, res),
      (err) => {
        sendError(res, err);
      },
      () => {
        // The client went away; nothing to answer.
      },
    );
  };
}
