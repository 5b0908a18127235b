import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  isValidFieldName,
  isValidFieldValue,
  isValidTrailers,
  parseRequestHeaders,
} from "../../../src/http2/request-headers.js";

// Header validation of the built-in HTTP/2 engine (RFC 9113 §8.2.1, §8.3). The invariant that
// matters most: whatever passes is accepted by the WHATWG Headers class the Connect router
// builds (a TypeError there once ended the process).

const latin1Text = fc.string({
  unit: fc.integer({ min: 0, max: 0xff }).map((c) => String.fromCharCode(c)),
  maxLength: 40,
});

function request(extra: [string, string][] = []): string[] {
  return [
    ":method",
    "POST",
    ":scheme",
    "http",
    ":path",
    "/p",
    ":authority",
    "h",
    ...extra.flat(),
  ];
}

describe("request header validation", () => {
  it("accepts only what Headers.append accepts (names and values, any octets)", () => {
    fc.assert(
      fc.property(latin1Text, latin1Text, (name, value) => {
        if (!isValidFieldName(name) || !isValidFieldValue(value)) return;
        expect(() => {
          new Headers().append(name, value);
        }).not.toThrow();
      }),
      { numRuns: 20_000 },
    );
  });

  it("accepts lower-case token names and rejects the rest", () => {
    for (const name of [
      "content-type",
      "x-b3-traceid",
      "te",
      "a!#$%&'*+-.^_`|~9",
    ])
      expect(isValidFieldName(name)).toBe(true);
    for (const name of [
      "",
      "Content-Type",
      "x y",
      "x\u0001",
      "x(y",
      'x"y',
      "x:y",
      "é",
      "x\u00ff",
    ])
      expect(isValidFieldName(name)).toBe(false);
  });

  it("rejects values with NUL, CR, LF, or surrounding whitespace (RFC 9113 §8.2.1)", () => {
    for (const value of ["", "a", "a b", "a\tb", "\u00ff", "x=1; y=2"])
      expect(isValidFieldValue(value)).toBe(true);
    for (const value of [
      "a\u0000",
      "a\rb",
      "a\nb",
      " a",
      "a ",
      "\ta",
      "a\t",
      "\u0100",
    ])
      expect(isValidFieldValue(value)).toBe(false);
  });

  it("parses a valid request and counts its list bytes as RFC 9113 §6.5.2 does", () => {
    const fields = request([["content-length", "3"]]);
    const parsed = parseRequestHeaders(fields);
    expect(parsed).toEqual({
      method: "POST",
      path: "/p",
      scheme: "http",
      authority: "h",
      contentLength: 3,
      listBytes: fields.reduce((n, s) => n + s.length, 0) + 32 * 5,
    });
  });

  it("rejects malformed requests", () => {
    const bad: string[][] = [
      request([["x y", "1"]]),
      request([["x", "a\nb"]]),
      request([["connection", "close"]]),
      request([["te", "gzip"]]),
      request([
        ["content-length", "1"],
        ["content-length", "2"],
      ]),
      request([["content-length", "-1"]]),
      [...request(), ":path", "/again"],
      [":method", "PO ST", ":scheme", "http", ":path", "/p"],
      [":method", "POST", ":scheme", "http", ":path", ""],
      [":method", "POST", ":scheme", "http"],
      [":method", "POST", ":scheme", "http", ":path", "/p", ":status", "200"],
      ["x", "1", ":method", "POST", ":scheme", "http", ":path", "/p"],
      [
        ":authority",
        "a\u0000b",
        ":method",
        "POST",
        ":scheme",
        "http",
        ":path",
        "/p",
      ],
    ];
    for (const fields of bad)
      expect(parseRequestHeaders(fields)).toBeUndefined();
  });

  it("checks trailers: regular, valid fields only", () => {
    expect(isValidTrailers(["grpc-status", "0"])).toBe(true);
    expect(isValidTrailers([":path", "/"])).toBe(false);
    expect(isValidTrailers(["x y", "1"])).toBe(false);
    expect(isValidTrailers(["x", "a\r\n"])).toBe(false);
  });
});
