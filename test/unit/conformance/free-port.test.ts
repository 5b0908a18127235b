import { createServer } from "node:net";
import { describe, expect, it } from "vitest";
import { freePort } from "../../../src/conformance/processes.js";

describe("freePort", () => {
  it("never hands out the same port twice in a row of calls (one service's several ports)", async () => {
    const ports: number[] = [];
    for (let i = 0; i < 300; i++) ports.push(await freePort());
    expect(new Set(ports).size).toBe(ports.length);
  });

  it("returns a port that can be listened on", async () => {
    const port = await freePort();
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", resolve);
    });
    await new Promise<void>((resolve) =>
      server.close(() => {
        resolve();
      }),
    );
  });
});
