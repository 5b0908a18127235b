import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  encodeHeaderBlock,
  HeaderListTooLargeError,
  HpackDecoder,
  HpackError,
} from "../../../src/http2/hpack.js";

const noListLimit = Number.MAX_SAFE_INTEGER;

function hex(text: string): Buffer {
  return Buffer.from(text.replace(/\s+/g, ""), "hex");
}

function decodeHex(decoder: HpackDecoder, text: string): string[] {
  const block = hex(text);
  return decoder.decode(block, 0, block.length, noListLimit);
}

/** Flattens `[name, value]` pairs the way decode returns them. */
function flat(...pairs: (readonly [string, string])[]): string[] {
  return pairs.flat();
}

function decodeError(decoder: HpackDecoder, text: string): unknown {
  try {
    decodeHex(decoder, text);
  } catch (err) {
    return err;
  }
  return undefined;
}

// RFC 7541 Appendix C.5 / C.6 header values.
const date21 = "Mon, 21 Oct 2013 20:13:21 GMT";
const date22 = "Mon, 21 Oct 2013 20:13:22 GMT";
const location = "https://www.example.com";
const setCookie = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";

describe("HpackDecoder", () => {
  describe("RFC 7541 Appendix C.2 (single representations)", () => {
    it("decodes a literal with incremental indexing and adds it to the table (C.2.1)", () => {
      const decoder = new HpackDecoder();
      expect(
        decodeHex(
          decoder,
          "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
        ),
      ).toEqual(flat(["custom-key", "custom-header"]));
      // The entry is now dynamic index 62.
      expect(decodeHex(decoder, "be")).toEqual(
        flat(["custom-key", "custom-header"]),
      );
    });

    it("decodes a literal without indexing and leaves the table empty (C.2.2)", () => {
      const decoder = new HpackDecoder();
      expect(decodeHex(decoder, "040c 2f73 616d 706c 652f 7061 7468")).toEqual(
        flat([":path", "/sample/path"]),
      );
      expect(decodeError(decoder, "be")).toBeInstanceOf(HpackError);
    });

    it("decodes a never-indexed literal and leaves the table empty (C.2.3)", () => {
      const decoder = new HpackDecoder();
      expect(
        decodeHex(decoder, "1008 7061 7373 776f 7264 0673 6563 7265 74"),
      ).toEqual(flat(["password", "secret"]));
      expect(decodeError(decoder, "be")).toBeInstanceOf(HpackError);
    });

    it("decodes an indexed static field (C.2.4)", () => {
      expect(decodeHex(new HpackDecoder(), "82")).toEqual(
        flat([":method", "GET"]),
      );
    });
  });

  describe("RFC 7541 Appendix C.3 (requests without Huffman)", () => {
    it("decodes three blocks that share one dynamic table", () => {
      const decoder = new HpackDecoder();
      expect(
        decodeHex(decoder, "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d"),
      ).toEqual(
        flat(
          [":method", "GET"],
          [":scheme", "http"],
          [":path", "/"],
          [":authority", "www.example.com"],
        ),
      );
      expect(decodeHex(decoder, "8286 84be 5808 6e6f 2d63 6163 6865")).toEqual(
        flat(
          [":method", "GET"],
          [":scheme", "http"],
          [":path", "/"],
          [":authority", "www.example.com"],
          ["cache-control", "no-cache"],
        ),
      );
      expect(
        decodeHex(
          decoder,
          "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
        ),
      ).toEqual(
        flat(
          [":method", "GET"],
          [":scheme", "https"],
          [":path", "/index.html"],
          [":authority", "www.example.com"],
          ["custom-key", "custom-value"],
        ),
      );
      // Table after C.3.3 (newest first): custom-key, cache-control, :authority.
      expect(decodeHex(decoder, "be bf c0")).toEqual(
        flat(
          ["custom-key", "custom-value"],
          ["cache-control", "no-cache"],
          [":authority", "www.example.com"],
        ),
      );
      expect(decodeError(decoder, "c1")).toBeInstanceOf(HpackError);
    });
  });

  describe("RFC 7541 Appendix C.4 (requests with Huffman)", () => {
    it("decodes three Huffman-coded blocks that share one dynamic table", () => {
      const decoder = new HpackDecoder();
      expect(
        decodeHex(decoder, "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff"),
      ).toEqual(
        flat(
          [":method", "GET"],
          [":scheme", "http"],
          [":path", "/"],
          [":authority", "www.example.com"],
        ),
      );
      expect(decodeHex(decoder, "8286 84be 5886 a8eb 1064 9cbf")).toEqual(
        flat(
          [":method", "GET"],
          [":scheme", "http"],
          [":path", "/"],
          [":authority", "www.example.com"],
          ["cache-control", "no-cache"],
        ),
      );
      expect(
        decodeHex(
          decoder,
          "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
        ),
      ).toEqual(
        flat(
          [":method", "GET"],
          [":scheme", "https"],
          [":path", "/index.html"],
          [":authority", "www.example.com"],
          ["custom-key", "custom-value"],
        ),
      );
    });
  });

  describe.each([
    {
      section: "C.5 (responses without Huffman)",
      blocks: [
        `4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
         2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
         6c65 2e63 6f6d`,
        "4803 3330 37c1 c0bf",
        `88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
         54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
         5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
         3d31`,
      ],
    },
    {
      section: "C.6 (responses with Huffman)",
      blocks: [
        `4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
         2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3`,
        "4883 640e ffc1 c0bf",
        `88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
         77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
         9587 3160 65c0 03ed 4ee5 b106 3d50 07`,
      ],
    },
  ])("RFC 7541 Appendix $section", ({ blocks }) => {
    const [first = "", second = "", third = ""] = blocks;

    it("decodes three responses with a 256-byte table, evicting as the RFC shows", () => {
      const decoder = new HpackDecoder(256);
      expect(decodeHex(decoder, first)).toEqual(
        flat(
          [":status", "302"],
          ["cache-control", "private"],
          ["date", date21],
          ["location", location],
        ),
      );
      // The second block adds :status 307, which evicts :status 302 (table stays at 222 bytes).
      expect(decodeHex(decoder, second)).toEqual(
        flat(
          [":status", "307"],
          ["cache-control", "private"],
          ["date", date21],
          ["location", location],
        ),
      );
      expect(decodeHex(decoder, third)).toEqual(
        flat(
          [":status", "200"],
          ["cache-control", "private"],
          ["date", date22],
          ["location", location],
          ["content-encoding", "gzip"],
          ["set-cookie", setCookie],
        ),
      );
      // The RFC's table after the third response: 3 entries, 215 bytes, newest first.
      expect(decodeHex(decoder, "be bf c0")).toEqual(
        flat(
          ["set-cookie", setCookie],
          ["content-encoding", "gzip"],
          ["date", date22],
        ),
      );
      expect(decodeError(decoder, "c1")).toBeInstanceOf(HpackError);
    });
  });

  describe("dynamic table", () => {
    it("returns the stored strings for indexed fields", () => {
      const decoder = new HpackDecoder();
      const [name, value] = decodeHex(
        decoder,
        "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
      );
      const again = decodeHex(decoder, "be be");
      expect(again).toEqual([name, value, name, value]);
      // Same string objects: nothing is copied per indexed field.
      expect(Object.is(again[0], name)).toBe(true);
    });

    it("applies size updates at the start of a block, evicting entries that no longer fit", () => {
      const decoder = new HpackDecoder(256);
      decodeHex(
        decoder,
        "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
      );
      // Two updates in a row (to 0, then back to 256) are allowed; the entry is gone.
      expect(decodeHex(decoder, "20 3f e1 01 82")).toEqual(
        flat([":method", "GET"]),
      );
      expect(decodeError(decoder, "be")).toBeInstanceOf(HpackError);
    });

    it("empties the table when an entry is larger than the table (RFC 7541 §4.4)", () => {
      const decoder = new HpackDecoder(64);
      // custom-key: custom-header is 55 bytes, fits; a 40-byte value does not (10 + 40 + 32 > 64).
      decodeHex(
        decoder,
        "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
      );
      const big = encodeLiteralWithIndexing("custom-key", "x".repeat(40));
      expect(decoder.decode(big, 0, big.length, noListLimit)).toEqual(
        flat(["custom-key", "x".repeat(40)]),
      );
      expect(decodeError(decoder, "be")).toBeInstanceOf(HpackError);
    });

    it("keeps working after the ring wraps many times", () => {
      const decoder = new HpackDecoder(200);
      for (let i = 0; i < 500; i++) {
        const name = `k${i}`;
        const value = `v${i}`.repeat(1 + (i % 7));
        const block = encodeLiteralWithIndexing(name, value);
        expect(decoder.decode(block, 0, block.length, noListLimit)).toEqual([
          name,
          value,
        ]);
        expect(decodeHex(decoder, "be")).toEqual([name, value]);
      }
    });

    it("stores nothing with a zero-size table", () => {
      const decoder = new HpackDecoder(0);
      const block = encodeLiteralWithIndexing("a", "b");
      expect(decoder.decode(block, 0, block.length, noListLimit)).toEqual([
        "a",
        "b",
      ]);
      expect(decodeError(decoder, "be")).toBeInstanceOf(HpackError);
    });
  });

  describe("dynamic table against a model", () => {
    /** An integer with a prefix of `mask` bits after the pattern `flags` (RFC 7541 §5.1). */
    function integer(value: number, mask: number, flags: number): Buffer {
      if (value < mask) return Buffer.from([flags | value]);
      const bytes = [flags | mask];
      let rest = value - mask;
      while (rest >= 128) {
        bytes.push((rest % 128) | 0x80);
        rest = Math.floor(rest / 128);
      }
      bytes.push(rest);
      return Buffer.from(bytes);
    }
    const indexed = (index: number): Buffer => integer(index, 0x7f, 0x80);
    const sizeUpdate = (sizeBytes: number): Buffer =>
      integer(sizeBytes, 0x1f, 0x20);

    it("holds the same entries as a list model through inserts, evictions, size updates and ring growth", () => {
      const maxTableSize = 16384;
      const op = fc.oneof(
        {
          weight: 20,
          arbitrary: fc.record({
            kind: fc.constant("insert" as const),
            name: fc.string({
              unit: fc.constantFrom("a", "b", "c"),
              minLength: 1,
              maxLength: 8,
            }),
            valueLength: fc.integer({ min: 0, max: 60 }),
          }),
        },
        {
          weight: 1,
          arbitrary: fc.record({
            kind: fc.constant("resize" as const),
            sizeBytes: fc.integer({ min: 0, max: maxTableSize }),
          }),
        },
      );
      fc.assert(
        fc.property(fc.array(op, { minLength: 150, maxLength: 400 }), (ops) => {
          const decoder = new HpackDecoder(maxTableSize);
          let model: [string, string][] = []; // newest first
          let limit = maxTableSize;
          const size = (): number =>
            model.reduce((sum, [n, v]) => sum + n.length + v.length + 32, 0);
          ops.forEach((o, i) => {
            if (o.kind === "resize") {
              limit = o.sizeBytes;
              while (size() > limit) model.pop();
              const block = sizeUpdate(limit);
              expect(
                decoder.decode(block, 0, block.length, noListLimit),
              ).toEqual([]);
              return;
            }
            const value = String(i).padEnd(o.valueLength, "v");
            const block = encodeLiteralWithIndexing(o.name, value);
            decoder.decode(block, 0, block.length, noListLimit);
            if (o.name.length + value.length + 32 > limit) {
              model = [];
            } else {
              model.unshift([o.name, value]);
              while (size() > limit) model.pop();
            }
          });
          const all = Buffer.concat(model.map((_, j) => indexed(62 + j)));
          expect(decoder.decode(all, 0, all.length, noListLimit)).toEqual(
            model.flat(),
          );
          const past = indexed(62 + model.length);
          expect(() =>
            decoder.decode(past, 0, past.length, noListLimit),
          ).toThrow(HpackError);
        }),
        { numRuns: 100 },
      );
    });
  });

  describe("unindexed literal values", () => {
    it("returns the previous string when the previous unindexed value repeats", () => {
      const decoder = new HpackDecoder();
      // :path (static 4) without indexing, Huffman "www.example.com", twice.
      const block = "04 8c f1e3 c2e5 f23a 6ba0 ab90 f4ff";
      const [, first] = decodeHex(decoder, block);
      const [, second] = decodeHex(decoder, block);
      expect(first).toBe("www.example.com");
      expect(Object.is(first, second)).toBe(true);
    });

    it("decodes a different value of the same length, raw or Huffman", () => {
      const decoder = new HpackDecoder();
      expect(decodeHex(decoder, "04 02 2f61 04 02 2f62")).toEqual(
        flat([":path", "/a"], [":path", "/b"]),
      );
      // The same two octets, raw ("d\x02") and then Huffman-coded ("302", RFC 7541 C.6.1).
      expect(decodeHex(decoder, "04 02 6402 04 82 6402")).toEqual(
        flat([":path", "d\u0002"], [":path", "302"]),
      );
    });
  });

  describe("input", () => {
    it("decodes only bytes [start, end) of a larger buffer", () => {
      const block = hex("ff ff 82 86 ff ff");
      expect(new HpackDecoder().decode(block, 2, 4, noListLimit)).toEqual(
        flat([":method", "GET"], [":scheme", "http"]),
      );
    });

    it("accepts a plain Uint8Array", () => {
      const block = new Uint8Array(hex("00 82 82 86"));
      expect(
        new HpackDecoder().decode(block.subarray(1), 1, 3, noListLimit),
      ).toEqual(flat([":method", "GET"], [":scheme", "http"]));
    });

    it("decodes an empty block to an empty list", () => {
      expect(new HpackDecoder().decode(Buffer.alloc(0), 0, 0, 0)).toEqual([]);
    });

    it("decodes header text as latin1", () => {
      // Raw literal "x" = "caf\xe9" (4 octets).
      expect(decodeHex(new HpackDecoder(), "00 01 78 04 63 61 66 e9")).toEqual(
        flat(["x", "caf\u00e9"]),
      );
    });

    it("rejects a range outside the block", () => {
      const block = hex("82 86");
      expect(() => new HpackDecoder().decode(block, 0, 3, noListLimit)).toThrow(
        RangeError,
      );
      expect(() => new HpackDecoder().decode(block, 2, 1, noListLimit)).toThrow(
        RangeError,
      );
    });

    it("does not allocate a ring for a huge advertised table up front", () => {
      expect(new HpackDecoder(0x7fffffff).decode(hex("82"), 0, 1, 100)).toEqual(
        flat([":method", "GET"]),
      );
    });

    it("rejects a table size it cannot represent", () => {
      expect(() => new HpackDecoder(-1)).toThrow(RangeError);
      expect(() => new HpackDecoder(1.5)).toThrow(RangeError);
    });
  });

  describe("malformed input", () => {
    it.each([
      ["indexed field 0", "80", /index 0/],
      ["indexed field past the empty dynamic table", "be", /past the table/],
      ["literal name index past the tables", "0f 30 00", /past the table/],
      ["integer cut off in its continuation bytes", "ff", /truncated integer/],
      [
        "integer cut off after a continuation byte",
        "ff 80",
        /truncated integer/,
      ],
      [
        "integer with more than 5 continuation bytes",
        "ff 80 80 80 80 80 00",
        /5 continuation bytes/,
      ],
      ["integer above 2^31 - 1", "ff ff ff ff ff 0f", /exceeds 2\^31 - 1/],
      ["literal without its name", "40", /truncated integer/],
      ["literal without its value", "44", /truncated integer/],
      ["string literal longer than the block", "00 05 61", /truncated string/],
      ["Huffman string containing EOS", "00 84 ff ff ff ff 00", /Huffman/],
      ["Huffman padding longer than 7 bits", "00 81 ff 00", /Huffman/],
      ["Huffman padding that is not all ones", "00 81 18 00", /Huffman/],
      [
        "table size update above the advertised size",
        "3f e2 1f",
        /exceeds the advertised 4096/,
      ],
      ["table size update after a field", "82 20", /after a header field/],
    ])("throws HpackError for %s", (_, block, message) => {
      const error = decodeError(new HpackDecoder(), block);
      expect(error).toBeInstanceOf(HpackError);
      expect((error as HpackError).message).toMatch(message);
    });

    it("accepts the valid neighbours of those inputs", () => {
      const decoder = new HpackDecoder();
      // "a" is 00011 + padding 111: valid.
      expect(decodeHex(decoder, "00 81 1f 00")).toEqual(flat(["a", ""]));
      // A size update to exactly the advertised size.
      expect(decodeHex(decoder, "3f e1 1f 82")).toEqual(
        flat([":method", "GET"]),
      );
      // Leading zero continuation bytes within the 5-byte bound (a size update to 31).
      expect(decodeHex(decoder, "3f 80 80 80 80 00")).toEqual([]);
    });
  });

  describe("header list limit", () => {
    // C.3.1: 42 + 43 + 38 + 57 = 180 bytes of header list.
    const c31 = hex("8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d");
    const c32 = hex("8286 84be 5808 6e6f 2d63 6163 6865");

    it("accepts a list of exactly the limit", () => {
      expect(new HpackDecoder().decode(c31, 0, c31.length, 180)).toHaveLength(
        8,
      );
    });

    it("throws HeaderListTooLargeError above the limit and keeps the table in sync", () => {
      const decoder = new HpackDecoder();
      let error: unknown;
      try {
        decoder.decode(c31, 0, c31.length, 179);
      } catch (err) {
        error = err;
      }
      expect(error).toBeInstanceOf(HeaderListTooLargeError);
      expect(error).toMatchObject({
        listSizeBytes: 180,
        maxListSizeBytes: 179,
      });
      // The block was decoded to its end: :authority was added, so C.3.2's index 62 resolves.
      expect(decoder.decode(c32, 0, c32.length, noListLimit)).toEqual(
        flat(
          [":method", "GET"],
          [":scheme", "http"],
          [":path", "/"],
          [":authority", "www.example.com"],
          ["cache-control", "no-cache"],
        ),
      );
    });
  });
});

describe("HpackDecoder on arbitrary input", () => {
  /** Decodes and reports what was thrown; only HpackError may come out. */
  function decodeOrHpackError(decoder: HpackDecoder, block: Uint8Array): void {
    try {
      decoder.decode(block, 0, block.length, noListLimit);
    } catch (err) {
      expect(err).toBeInstanceOf(HpackError);
    }
  }

  it("throws nothing but HpackError on random bytes", () => {
    const shared = new HpackDecoder(256);
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 64 }), (block) => {
        decodeOrHpackError(new HpackDecoder(), block);
        // One decoder across runs too, so its table state is arbitrary as well.
        decodeOrHpackError(shared, block);
      }),
      { numRuns: 5000 },
    );
  });

  it("throws nothing but HpackError on valid blocks with random bytes spliced in", () => {
    // Pieces of real blocks (literals that fill the table, indexed references, Huffman strings)
    // get further into the decoder than pure noise does.
    const fragments = [
      "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572",
      "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
      "be bf c0 c1",
      "3f e1 01",
      "20",
      "1008 7061 7373 776f 7264 0673 6563 7265 74",
      "5886 a8eb 1064 9cbf",
    ].map(hex);
    const decoder = new HpackDecoder(256);
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            fc.constantFrom(...fragments),
            fc.uint8Array({ maxLength: 6 }),
          ),
          { maxLength: 8 },
        ),
        (pieces) => {
          decodeOrHpackError(decoder, Buffer.concat(pieces));
        },
      ),
      { numRuns: 5000 },
    );
  });
});

describe("encodeHeaderBlock", () => {
  it("encodes exact static matches as indexed fields", () => {
    expect(
      encodeHeaderBlock([
        [":status", "200"],
        [":status", "500"],
        ["accept-encoding", "gzip, deflate"],
      ]),
    ).toEqual(hex("88 8e 90"));
  });

  it("encodes other fields as literals without indexing, with the static name index", () => {
    expect(
      encodeHeaderBlock([
        [":status", "429"],
        ["content-type", "application/grpc"],
      ]),
    ).toEqual(
      Buffer.concat([
        hex("08 03"),
        Buffer.from("429"),
        // content-type is static 31: 4-bit prefix 15, then 16.
        hex("0f 10 10"),
        Buffer.from("application/grpc"),
      ]),
    );
  });

  it("encodes unknown names as literal strings", () => {
    expect(encodeHeaderBlock([["grpc-status", "0"]])).toEqual(
      Buffer.concat([
        hex("00 0b"),
        Buffer.from("grpc-status"),
        hex("01"),
        Buffer.from("0"),
      ]),
    );
  });

  it("round-trips through the decoder without touching its dynamic table", () => {
    const fields: [string, string][] = [
      [":status", "200"],
      ["content-type", "application/grpc"],
      ["grpc-status", "0"],
      ["grpc-message", "over limit: caf\u00e9"],
      ["x-ratelimit-limit", "10, 10;w=60"],
      ["x-long", "v".repeat(300)],
      ["n".repeat(200), ""],
      [":status", "429"],
      ["www-authenticate", "basic"],
      ["accept", ""],
    ];
    const block = encodeHeaderBlock(fields);
    const decoder = new HpackDecoder();
    expect(decoder.decode(block, 0, block.length, noListLimit)).toEqual(
      fields.flat(),
    );
    expect(decodeError(decoder, "be")).toBeInstanceOf(HpackError);
  });

  it("encodes an empty list as an empty block", () => {
    expect(encodeHeaderBlock([])).toHaveLength(0);
  });

  it("rejects upper-case names and text outside latin1", () => {
    expect(() => encodeHeaderBlock([["Content-Type", "x"]])).toThrow(
      RangeError,
    );
    expect(() => encodeHeaderBlock([["x", "\u20ac"]])).toThrow(RangeError);
  });
});

describe("encodeHeaderBlock and HpackDecoder", () => {
  it("round-trip arbitrary lower-case names and latin1 values", () => {
    const name = fc.oneof(
      fc.constantFrom(":status", "content-type", "grpc-status", "accept", "te"),
      fc.string({
        unit: fc.constantFrom("a", "b", "x", "z", "-", "0", "9", ":"),
        maxLength: 150,
      }),
    );
    const value = fc.oneof(
      fc.constantFrom("200", "404", "", "gzip, deflate", "application/grpc"),
      fc.string({
        unit: fc
          .integer({ min: 0, max: 255 })
          .map((c) => String.fromCharCode(c)),
        maxLength: 300,
      }),
    );
    const decoder = new HpackDecoder();
    fc.assert(
      fc.property(
        fc.array(fc.tuple(name, value), { maxLength: 12 }),
        (fields) => {
          const block = encodeHeaderBlock(fields);
          expect(decoder.decode(block, 0, block.length, noListLimit)).toEqual(
            fields.flat(),
          );
        },
      ),
      { numRuns: 1000 },
    );
  });
});

/** A literal with incremental indexing and a new name, raw strings shorter than 127 octets. */
function encodeLiteralWithIndexing(name: string, value: string): Buffer {
  return Buffer.concat([
    Buffer.from([0x40, name.length]),
    Buffer.from(name, "latin1"),
    Buffer.from([value.length]),
    Buffer.from(value, "latin1"),
  ]);
}
