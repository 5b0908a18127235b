import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  decodeHuffman,
  huffmanCodeLengths,
  huffmanCodes,
} from "../../../src/http2/huffman.js";

// An independent reference for the table-driven decoder: walks the input one bit at a time and
// looks each (length, code) prefix up in a map built straight from the Appendix B table.

const symbolByCode = new Map<string, number>();
for (let symbol = 0; symbol <= 256; symbol++) {
  symbolByCode.set(
    `${huffmanCodeLengths[symbol]}:${huffmanCodes[symbol]}`,
    symbol,
  );
}

/** Bit-by-bit reference decoder: the octets, or null when the input is invalid. */
function referenceDecode(input: Uint8Array): number[] | null {
  const output: number[] = [];
  let code = 0;
  let length = 0;
  for (const byte of input) {
    for (let bit = 7; bit >= 0; bit--) {
      code = code * 2 + ((byte >> bit) & 1);
      length++;
      const symbol = symbolByCode.get(`${length}:${code}`);
      if (symbol === undefined) continue;
      if (symbol === 256) return null; // EOS in the data
      output.push(symbol);
      code = 0;
      length = 0;
    }
  }
  // Leftover bits are padding: at most 7, all ones (a prefix of EOS).
  if (length > 7 || code !== 2 ** length - 1) return null;
  return output;
}

/** Reference encoder: codes MSB first, padded with ones to a whole octet. */
function referenceEncode(symbols: readonly number[]): Uint8Array {
  const bits: number[] = [];
  for (const symbol of symbols) {
    const code = huffmanCodes[symbol] ?? 0;
    const length = huffmanCodeLengths[symbol] ?? 0;
    for (let i = length - 1; i >= 0; i--)
      bits.push(Math.floor(code / 2 ** i) % 2);
  }
  while (bits.length % 8 !== 0) bits.push(1);
  const out = new Uint8Array(bits.length / 8);
  bits.forEach((bit, i) => {
    out[i >> 3] = (out[i >> 3] ?? 0) | (bit << (7 - (i & 7)));
  });
  return out;
}

/** The table-driven decoder, in the reference's result shape. */
function tableDecode(input: Uint8Array): number[] | null {
  const out = new Uint8Array(Math.floor((input.length * 8) / 5));
  const length = decodeHuffman(input, 0, input.length, out);
  return length < 0 ? null : Array.from(out.subarray(0, length));
}

describe("huffman code table", () => {
  it("has 257 codes of 5 to 30 bits forming a complete prefix code", () => {
    expect(huffmanCodes).toHaveLength(257);
    expect(huffmanCodeLengths).toHaveLength(257);
    // Kraft sum of a complete prefix code is exactly 1.
    let kraft = 0;
    for (const length of huffmanCodeLengths) {
      expect(length).toBeGreaterThanOrEqual(5);
      expect(length).toBeLessThanOrEqual(30);
      kraft += 2 ** -length;
    }
    expect(kraft).toBe(1);
    // EOS is 30 ones (RFC 7541 Appendix B).
    expect(huffmanCodes[256]).toBe(0x3fffffff);
    expect(huffmanCodeLengths[256]).toBe(30);
  });
});

describe("decodeHuffman", () => {
  it.each([
    ["f1e3 c2e5 f23a 6ba0 ab90 f4ff", "www.example.com"],
    ["a8eb 1064 9cbf", "no-cache"],
    ["25a8 49e9 5ba9 7d7f", "custom-key"],
    ["6402", "302"],
    ["aec3 771a 4b", "private"],
    ["9d29 ad17 1863 c78f 0b97 c8e9 ae82 ae43 d3", "https://www.example.com"],
    ["", ""],
  ])("decodes %s (RFC 7541 Appendix C) to %j", (hexText, text) => {
    const input = Buffer.from(hexText.replace(/\s+/g, ""), "hex");
    expect(Buffer.from(tableDecode(input) ?? []).toString("latin1")).toBe(text);
  });

  it("rejects EOS, long padding and padding that is not all ones", () => {
    expect(tableDecode(Uint8Array.of(0xff, 0xff, 0xff, 0xff))).toBeNull();
    expect(tableDecode(Uint8Array.of(0xff))).toBeNull();
    expect(tableDecode(Uint8Array.of(0x18))).toBeNull(); // "a" + 000
    expect(tableDecode(Uint8Array.of(0x1f))).toEqual([0x61]); // "a" + 111
  });

  it("decodes what the reference encoder encodes, for every octet sequence", () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 255 }), { maxLength: 80 }),
        (symbols) => {
          expect(tableDecode(referenceEncode(symbols))).toEqual(symbols);
        },
      ),
      { numRuns: 2000 },
    );
  });

  it("agrees with the bit-by-bit reference decoder on arbitrary bytes", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 40 }), (input) => {
        expect(tableDecode(input)).toEqual(referenceDecode(input));
      }),
      { numRuns: 5000 },
    );
  });

  it("agrees with the reference decoder on valid strings with one bit flipped or cut short", () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 0, max: 255 }), {
          minLength: 1,
          maxLength: 40,
        }),
        fc.nat(),
        fc.boolean(),
        (symbols, at, cut) => {
          const input = referenceEncode(symbols);
          if (cut) {
            const shorter = input.subarray(0, at % input.length);
            expect(tableDecode(shorter)).toEqual(referenceDecode(shorter));
            return;
          }
          const bit = at % (input.length * 8);
          input[bit >> 3] = (input[bit >> 3] ?? 0) ^ (0x80 >> (bit & 7));
          expect(tableDecode(input)).toEqual(referenceDecode(input));
        },
      ),
      { numRuns: 5000 },
    );
  });
});
