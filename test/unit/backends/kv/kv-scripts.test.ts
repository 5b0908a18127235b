import { describe, expect, it } from "vitest";
import {
  isNoScript,
  kvScript,
  runKvScript,
  type KvScriptRunner,
} from "../../../../src/backends/kv/kv-scripts.js";

/** A runner whose script cache is `cached`; records every call. */
function fakeRunner(cached: Set<string>, failWith?: Error) {
  const calls: string[] = [];
  const runner: KvScriptRunner = {
    evalsha(sha, numKeys, ...keysAndArgs) {
      calls.push(`EVALSHA ${sha} ${String(numKeys)} ${keysAndArgs.join(" ")}`);
      if (failWith !== undefined) return Promise.reject(failWith);
      if (!cached.has(sha))
        return Promise.reject(
          new Error("NOSCRIPT No matching script. Please use EVAL."),
        );
      return Promise.resolve("by sha");
    },
    eval(text, numKeys, ...keysAndArgs) {
      calls.push(`EVAL ${String(numKeys)} ${keysAndArgs.join(" ")}`);
      cached.add(kvScript(text).sha);
      return Promise.resolve("by text");
    },
  };
  return { runner, calls };
}

describe("runKvScript", () => {
  const script = kvScript("return 1");

  it("computes the script's SHA-1 once, as redis does", () => {
    expect(script.sha).toBe("e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
  });

  it("sends EVALSHA with the keys then the arguments", async () => {
    const { runner, calls } = fakeRunner(new Set([script.sha]));
    expect(await runKvScript(runner, script, ["k"], ["a", 2])).toBe("by sha");
    expect(calls).toEqual([`EVALSHA ${script.sha} 1 k a 2`]);
  });

  it("sends the whole script once after NOSCRIPT, and EVALSHA again next time", async () => {
    const { runner, calls } = fakeRunner(new Set());
    expect(await runKvScript(runner, script, ["k"], ["a"])).toBe("by text");
    expect(await runKvScript(runner, script, ["k"], ["b"])).toBe("by sha");
    expect(calls).toEqual([
      `EVALSHA ${script.sha} 1 k a`,
      "EVAL 1 k a",
      `EVALSHA ${script.sha} 1 k b`,
    ]);
  });

  it("rejects with any other error unchanged, without EVAL", async () => {
    const failure = new Error("MOVED 1234 127.0.0.1:7001");
    const { runner, calls } = fakeRunner(new Set(), failure);
    await expect(runKvScript(runner, script, ["k"], [])).rejects.toBe(failure);
    expect(calls).toHaveLength(1);
  });
});

describe("isNoScript", () => {
  it("recognizes the NOSCRIPT reply only", () => {
    expect(isNoScript(new Error("NOSCRIPT No matching script."))).toBe(true);
    expect(isNoScript("NOSCRIPT")).toBe(true);
    expect(isNoScript(new Error("ERR NOSCRIPT"))).toBe(false);
  });
});
