import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { cors as connectCors } from "@connectrpc/connect";
import { afterEach, describe, expect, it } from "vitest";
import { createCors } from "../../../src/server/cors.js";

let server: Server | undefined;
afterEach(async () => {
  await new Promise<void>((resolve) => {
    if (server === undefined) resolve();
    else
      server.close(() => {
        resolve();
      });
  });
  server = undefined;
});

/** A server that applies CORS, then answers 200 "handled". */
async function serve(origins: string[]): Promise<string> {
  const cors = createCors(origins);
  server = createServer((req, res) => {
    if (cors(req, res)) return;
    res.end("handled");
  });
  await new Promise<void>((resolve) => server!.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/x`;
}

const preflight = (origin: string) => ({
  method: "OPTIONS",
  headers: {
    origin,
    "access-control-request-method": "POST",
    "access-control-request-headers": "content-type,x-grpc-web",
  },
});

describe("createCors", () => {
  it("adds nothing while off (empty list)", async () => {
    const url = await serve([]);
    const res = await fetch(url, preflight("http://a.test"));
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    expect(await res.text()).toBe("handled");
  });

  it("answers a preflight from a listed origin with Connect's lists", async () => {
    const url = await serve(["http://a.test", "http://b.test"]);
    const res = await fetch(url, preflight("http://b.test"));
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe(
      "http://b.test",
    );
    expect(res.headers.get("access-control-allow-methods")).toBe(
      connectCors.allowedMethods.join(", "),
    );
    expect(res.headers.get("access-control-allow-headers")).toBe(
      connectCors.allowedHeaders.join(", "),
    );
    const call = await fetch(url, {
      method: "POST",
      headers: { origin: "http://a.test" },
    });
    expect(await call.text()).toBe("handled");
    expect(call.headers.get("access-control-allow-origin")).toBe(
      "http://a.test",
    );
    expect(call.headers.get("access-control-expose-headers")).toBe(
      connectCors.exposedHeaders.join(", "),
    );
  });

  it("ignores an origin not listed", async () => {
    const url = await serve(["http://a.test"]);
    const res = await fetch(url, preflight("http://evil.test"));
    expect(res.headers.get("access-control-allow-origin")).toBeNull();
    expect(await res.text()).toBe("handled");
  });

  it("allows any origin with *", async () => {
    const url = await serve(["*"]);
    const res = await fetch(url, preflight("http://any.test"));
    expect(res.status).toBe(204);
    expect(res.headers.get("access-control-allow-origin")).toBe("*");
  });
});
