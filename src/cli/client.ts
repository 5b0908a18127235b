import { readFileSync } from "node:fs";
import { create, toJsonString } from "@bufbuild/protobuf";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import {
  ExplainResponseSchema,
  ExplainService,
  RateLimitRequestSchema,
  RateLimitResponseSchema,
  RateLimitResponse_Code,
  RateLimitResponse_RateLimit_Unit,
  RateLimitService,
  RateLimitDescriptor_EntrySchema,
  type RateLimitDescriptor_Entry,
  type RateLimitResponse,
} from "../proto.js";
import { formatExplanation } from "./explain-format.js";
import {
  FlagError,
  flagUsage,
  isMain,
  parseGoFlags,
  type FlagSpec,
} from "./go-flags.js";

const flags = {
  dial_string: {
    kind: "string",
    default: "localhost:8081",
    help: "url of ratelimit server in <host>:<port> form",
  },
  domain: {
    kind: "string",
    default: "",
    help: "rate limit configuration domain to query",
  },
  descriptors: {
    kind: "string",
    repeatable: true,
    help: "descriptor list to query in <key>=<value>,<key>=<value>,... form; repeat for several descriptors",
  },
  hits_addend: {
    kind: "string",
    default: "0",
    help: "hits to add (0 means 1)",
  },
  json: { kind: "bool", help: "print the response as proto3 JSON" },
  explain: {
    kind: "bool",
    help: "call the Explain API instead of ShouldRateLimit (the server needs EXPLAIN_ENABLED=true): match path, rule, counter and decision, charging nothing",
  },
  charge: {
    kind: "bool",
    help: "with -explain: also decide and count the request, as ShouldRateLimit does",
  },
  "grpc-use-tls": { kind: "bool", help: "use TLS to connect to the server" },
  "grpc-server-ca-file": {
    kind: "string",
    default: "",
    help: "CA file to verify the server certificate",
  },
  "grpc-cert-file": {
    kind: "string",
    default: "",
    help: "client certificate file (mTLS)",
  },
  "grpc-key-file": {
    kind: "string",
    default: "",
    help: "client key file (mTLS)",
  },
} as const satisfies Record<string, FlagSpec>;

/**
 * Parses one `-descriptors` value: comma-separated `key=value` pairs, each splitting into
 * exactly two parts on `=`.
 *
 * @throws {@link FlagError} `invalid descriptor list` otherwise
 */
export function parseDescriptorFlag(text: string): RateLimitDescriptor_Entry[] {
  return text.split(",").map((pair) => {
    const [key, value, extra] = pair.split("=");
    if (key === undefined || value === undefined || extra !== undefined) {
      throw new FlagError(`invalid descriptor list: "${text}"`);
    }
    return create(RateLimitDescriptor_EntrySchema, { key, value });
  });
}

/** Renders a response for people: one line per descriptor, then the overall code. */
export function formatResponse(
  response: RateLimitResponse,
  descriptors: readonly string[],
): string {
  const lines: string[] = [];
  response.statuses.forEach((status, i) => {
    const code = RateLimitResponse_Code[status.code];
    const limit = status.currentLimit;
    let detail: string;
    if (limit !== undefined) {
      const unit = RateLimitResponse_RateLimit_Unit[limit.unit];
      const name = limit.name !== "" ? ` (${limit.name})` : "";
      const reset =
        status.durationUntilReset !== undefined
          ? `, resets in ${status.durationUntilReset.seconds}s`
          : "";
      detail = `limit ${limit.requestsPerUnit} per ${unit}${name}, ${status.limitRemaining} remaining${reset}`;
    } else if (status.limitRemaining === 4294967295) {
      detail = "unlimited";
    } else {
      detail = "no limit applies";
    }
    lines.push(`descriptor ${descriptors[i] ?? String(i)}: ${code}, ${detail}`);
  });
  for (const h of response.responseHeadersToAdd)
    lines.push(`header ${h.key}: ${h.value}`);
  lines.push(`overall: ${RateLimitResponse_Code[response.overallCode]}`);
  return lines.join("\n");
}

/**
 * Runs the client: sends one `ShouldRateLimit` over gRPC and prints the response; with
 * `-explain`, calls `ratelimit.explain.v1.ExplainService/Explain` instead and prints the
 * explanation as a tree (`-json`: proto3 JSON).
 *
 * @returns the exit code: 0 on a response (OK or OVER_LIMIT), 1 on a connection or request error, 2 on bad flags
 */
export async function runClient(
  argv: readonly string[],
  out: (line: string) => void,
  err: (line: string) => void,
): Promise<number> {
  let parsed;
  try {
    parsed = parseGoFlags(argv, flags);
  } catch (e) {
    err(e instanceof Error ? e.message : String(e));
    err(`usage of ratelimit-client:\n${flagUsage(flags)}`);
    return 2;
  }
  if (parsed.help) {
    out(`usage of ratelimit-client:\n${flagUsage(flags)}`);
    return 0;
  }
  const texts = parsed.lists.get("descriptors") ?? [];
  let request;
  try {
    const hits = Number(parsed.values.get("hits_addend"));
    if (!Number.isInteger(hits) || hits < 0 || hits > 4294967295) {
      throw new FlagError(
        `invalid -hits_addend: ${parsed.values.get("hits_addend") ?? ""}`,
      );
    }
    request = create(RateLimitRequestSchema, {
      domain: parsed.values.get("domain") ?? "",
      hitsAddend: hits,
      descriptors: texts.map((t) => ({ entries: parseDescriptorFlag(t) })),
    });
  } catch (e) {
    err(e instanceof Error ? e.message : String(e));
    return 2;
  }
  const useTls = parsed.values.get("grpc-use-tls") === "true";
  const read = (flag: string): Buffer | undefined => {
    const path = parsed.values.get(flag) ?? "";
    return path === "" ? undefined : readFileSync(path);
  };
  const ca = read("grpc-server-ca-file");
  const cert = read("grpc-cert-file");
  const key = read("grpc-key-file");
  const transport = createGrpcTransport({
    baseUrl: `${useTls ? "https" : "http"}://${parsed.values.get("dial_string") ?? ""}`,
    nodeOptions: {
      ...(ca !== undefined ? { ca } : {}),
      ...(cert !== undefined ? { cert } : {}),
      ...(key !== undefined ? { key } : {}),
    },
  });
  const json = parsed.values.get("json") === "true";
  if (parsed.values.get("explain") === "true") {
    try {
      const response = await createClient(ExplainService, transport).explain(
        { request, charge: parsed.values.get("charge") === "true" },
        { timeoutMs: 10_000 },
      );
      out(
        json
          ? toJsonString(ExplainResponseSchema, response)
          : formatExplanation(response, request),
      );
      return 0;
    } catch (e) {
      err(`request error: ${e instanceof Error ? e.message : String(e)}`);
      return 1;
    }
  }
  const client = createClient(RateLimitService, transport);
  try {
    const response = await client.shouldRateLimit(request, {
      timeoutMs: 10_000,
    });
    out(
      json
        ? toJsonString(RateLimitResponseSchema, response)
        : `domain: ${request.domain}\n${formatResponse(response, texts)}`,
    );
    return 0;
  } catch (e) {
    err(`request error: ${e instanceof Error ? e.message : String(e)}`);
    return 1;
  }
}

if (isMain(import.meta.url)) {
  const code = await runClient(
    process.argv.slice(2),
    (line) => process.stdout.write(line + "\n"),
    (line) => process.stderr.write(line + "\n"),
  );
  process.exit(code);
}
