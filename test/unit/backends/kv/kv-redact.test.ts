import { describe, expect, it } from "vitest";
import {
  kvSecrets,
  redactedError,
  redactSecrets,
} from "../../../../src/backends/kv/kv-redact.js";
import { resolveKvInstanceOptions } from "../../../../src/backends/kv/kv-options.js";

describe("kv redaction", () => {
  it("lists the instance's and its sentinels' passwords", () => {
    const instance = resolveKvInstanceOptions({
      type: "sentinel",
      url: "mymaster,127.0.0.1:26379",
      auth: "user:s3cret",
      sentinelAuth: "watch",
    });
    expect(kvSecrets(instance).sort()).toEqual(["s3cret", "watch"]);
  });

  it("masks every occurrence of each secret", () => {
    expect(redactSecrets("AUTH s3cret s3cret x", ["s3cret"])).toBe(
      "AUTH ***** ***** x",
    );
  });

  it("copies an error's name and message, redacted, without its other fields", () => {
    const err = Object.assign(new TypeError("WRONGPASS for s3cret"), {
      command: { name: "auth", args: ["s3cret"] },
    });
    const copy = redactedError(err, ["s3cret"]);
    expect(copy.name).toBe("TypeError");
    expect(copy.message).toBe("WRONGPASS for *****");
    expect(copy).not.toHaveProperty("command");
    expect(redactedError(new Error("ERR no such key"), []).message).toBe(
      "ERR no such key",
    );
  });
});
