// The HPACK Huffman code (RFC 7541 §5.2, Appendix B) and a table-driven decoder for it.

/**
 * Huffman code of each symbol, indexed by symbol: octets 0–255, then EOS (256). Each code is
 * right-aligned in the number, {@link huffmanCodeLengths} bits long (RFC 7541 Appendix B).
 */
export const huffmanCodes: readonly number[] = [
  0x1ff8, 0x7fffd8, 0xfffffe2, 0xfffffe3, 0xfffffe4, 0xfffffe5, 0xfffffe6,
  0xfffffe7, 0xfffffe8, 0xffffea, 0x3ffffffc, 0xfffffe9, 0xfffffea, 0x3ffffffd,
  0xfffffeb, 0xfffffec, 0xfffffed, 0xfffffee, 0xfffffef, 0xffffff0, 0xffffff1,
  0xffffff2, 0x3ffffffe, 0xffffff3, 0xffffff4, 0xffffff5, 0xffffff6, 0xffffff7,
  0xffffff8, 0xffffff9, 0xffffffa, 0xffffffb, 0x14, 0x3f8, 0x3f9, 0xffa, 0x1ff9,
  0x15, 0xf8, 0x7fa, 0x3fa, 0x3fb, 0xf9, 0x7fb, 0xfa, 0x16, 0x17, 0x18, 0x0,
  0x1, 0x2, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x5c, 0xfb, 0x7ffc, 0x20,
  0xffb, 0x3fc, 0x1ffa, 0x21, 0x5d, 0x5e, 0x5f, 0x60, 0x61, 0x62, 0x63, 0x64,
  0x65, 0x66, 0x67, 0x68, 0x69, 0x6a, 0x6b, 0x6c, 0x6d, 0x6e, 0x6f, 0x70, 0x71,
  0x72, 0xfc, 0x73, 0xfd, 0x1ffb, 0x7fff0, 0x1ffc, 0x3ffc, 0x22, 0x7ffd, 0x3,
  0x23, 0x4, 0x24, 0x5, 0x25, 0x26, 0x27, 0x6, 0x74, 0x75, 0x28, 0x29, 0x2a,
  0x7, 0x2b, 0x76, 0x2c, 0x8, 0x9, 0x2d, 0x77, 0x78, 0x79, 0x7a, 0x7b, 0x7ffe,
  0x7fc, 0x3ffd, 0x1ffd, 0xffffffc, 0xfffe6, 0x3fffd2, 0xfffe7, 0xfffe8,
  0x3fffd3, 0x3fffd4, 0x3fffd5, 0x7fffd9, 0x3fffd6, 0x7fffda, 0x7fffdb,
  0x7fffdc, 0x7fffdd, 0x7fffde, 0xffffeb, 0x7fffdf, 0xffffec, 0xffffed,
  0x3fffd7, 0x7fffe0, 0xffffee, 0x7fffe1, 0x7fffe2, 0x7fffe3, 0x7fffe4,
  0x1fffdc, 0x3fffd8, 0x7fffe5, 0x3fffd9, 0x7fffe6, 0x7fffe7, 0xffffef,
  0x3fffda, 0x1fffdd, 0xfffe9, 0x3fffdb, 0x3fffdc, 0x7fffe8, 0x7fffe9, 0x1fffde,
  0x7fffea, 0x3fffdd, 0x3fffde, 0xfffff0, 0x1fffdf, 0x3fffdf, 0x7fffeb,
  0x7fffec, 0x1fffe0, 0x1fffe1, 0x3fffe0, 0x1fffe2, 0x7fffed, 0x3fffe1,
  0x7fffee, 0x7fffef, 0xfffea, 0x3fffe2, 0x3fffe3, 0x3fffe4, 0x7ffff0, 0x3fffe5,
  0x3fffe6, 0x7ffff1, 0x3ffffe0, 0x3ffffe1, 0xfffeb, 0x7fff1, 0x3fffe7,
  0x7ffff2, 0x3fffe8, 0x1ffffec, 0x3ffffe2, 0x3ffffe3, 0x3ffffe4, 0x7ffffde,
  0x7ffffdf, 0x3ffffe5, 0xfffff1, 0x1ffffed, 0x7fff2, 0x1fffe3, 0x3ffffe6,
  0x7ffffe0, 0x7ffffe1, 0x3ffffe7, 0x7ffffe2, 0xfffff2, 0x1fffe4, 0x1fffe5,
  0x3ffffe8, 0x3ffffe9, 0xffffffd, 0x7ffffe3, 0x7ffffe4, 0x7ffffe5, 0xfffec,
  0xfffff3, 0xfffed, 0x1fffe6, 0x3fffe9, 0x1fffe7, 0x1fffe8, 0x7ffff3, 0x3fffea,
  0x3fffeb, 0x1ffffee, 0x1ffffef, 0xfffff4, 0xfffff5, 0x3ffffea, 0x7ffff4,
  0x3ffffeb, 0x7ffffe6, 0x3ffffec, 0x3ffffed, 0x7ffffe7, 0x7ffffe8, 0x7ffffe9,
  0x7ffffea, 0x7ffffeb, 0xffffffe, 0x7ffffec, 0x7ffffed, 0x7ffffee, 0x7ffffef,
  0x7fffff0, 0x3ffffee, 0x3fffffff,
];

/** Length in bits (5–30) of each code in {@link huffmanCodes}, same index (RFC 7541 Appendix B). */
export const huffmanCodeLengths: readonly number[] = [
  13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28,
  28, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 28, 6, 10, 10, 12, 13, 6, 8,
  11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12,
  10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
  8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6, 5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5,
  6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22,
  22, 23, 22, 23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23,
  21, 22, 23, 22, 23, 23, 24, 22, 21, 20, 22, 22, 23, 23, 21, 23, 22, 22, 24,
  21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22,
  23, 26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21,
  26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28, 27, 27, 27, 20, 24, 20, 21, 22,
  21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27,
  27, 28, 27, 27, 27, 27, 27, 26, 30,
];

const eosSymbol = 256;

// The decoder is a byte-at-a-time state machine. A state is an internal node of the code tree
// (the bits read since the last complete symbol); there are 256 of them for 257 leaves, the root
// being state 0. transitions[state * 256 + byte] packs what reading those 8 bits does:
//   bits 0–7   the state afterwards
//   bits 8–15  the first symbol completed (if any)
//   bits 16–23 the second symbol completed (if any); codes are ≥ 5 bits, so one byte completes
//              at most two of them
//   bits 24–25 how many symbols were completed (0–2)
//   bit 26     EOS was completed: always a decoding error (RFC 7541 §5.2)
const countShift = 24;
const eosFlag = 1 << 26;
const { transitions, acceptingStates } = buildDecoderTables();

function buildDecoderTables(): {
  transitions: Uint32Array;
  acceptingStates: Uint8Array;
} {
  // children[node * 2 + bit]: > 0 internal node, < 0 leaf -(symbol + 1). The root (0) is never
  // a child, so 0 means "unset" while building; the code is complete, so none stays unset.
  const children = new Int16Array(512);
  let nodeCount = 1;
  for (let symbol = 0; symbol <= eosSymbol; symbol++) {
    const code = huffmanCodes[symbol] ?? 0;
    const length = huffmanCodeLengths[symbol] ?? 0;
    let node = 0;
    for (let bitIndex = length - 1; bitIndex > 0; bitIndex--) {
      const slot = node * 2 + ((code >>> bitIndex) & 1);
      if (children[slot] === 0) children[slot] = nodeCount++;
      node = children[slot] ?? 0;
    }
    children[node * 2 + (code & 1)] = -(symbol + 1);
  }

  // Valid padding is a prefix of EOS (all ones) of at most 7 bits (RFC 7541 §5.2): the string may
  // end in the root or in one of the first 7 nodes on the all-ones path.
  const acceptingStates = new Uint8Array(nodeCount);
  let onesNode = 0;
  for (let depth = 0; depth <= 7; depth++) {
    acceptingStates[onesNode] = 1;
    onesNode = children[onesNode * 2 + 1] ?? 0;
  }

  const transitions = new Uint32Array(nodeCount * 256);
  for (let state = 0; state < nodeCount; state++) {
    for (let byte = 0; byte < 256; byte++) {
      let node = state;
      let count = 0;
      let symbols = 0;
      let eos = false;
      for (let bitIndex = 7; bitIndex >= 0; bitIndex--) {
        const child = children[node * 2 + ((byte >>> bitIndex) & 1)] ?? 0;
        if (child >= 0) {
          node = child;
          continue;
        }
        const symbol = -child - 1;
        if (symbol === eosSymbol) {
          eos = true;
          break;
        }
        symbols |= symbol << (8 + 8 * count);
        count++;
        node = 0;
      }
      transitions[state * 256 + byte] = eos
        ? eosFlag
        : node | symbols | (count << countShift);
    }
  }
  return { transitions, acceptingStates };
}

/**
 * Decodes the Huffman-coded octets `src[start, end)` into `out` from index 0 (RFC 7541 §5.2).
 *
 * @param out - receives the decoded octets; must hold at least `⌊(end − start) × 8 / 5⌋` bytes
 *   (the shortest code is 5 bits)
 * @returns the number of octets written, or -1 when the input is not a valid Huffman string: it
 *   contains the EOS code, or ends in padding longer than 7 bits or not all ones
 */
export function decodeHuffman(
  src: Uint8Array,
  start: number,
  end: number,
  out: Uint8Array,
): number {
  let state = 0;
  let length = 0;
  for (let i = start; i < end; i++) {
    const entry = transitions[(state << 8) | (src[i] ?? 0)] ?? eosFlag;
    const count = entry >>> countShift;
    if (count !== 0) {
      if (count > 2) return -1; // eosFlag set
      out[length++] = entry >>> 8;
      if (count === 2) out[length++] = entry >>> 16;
    }
    state = entry & 0xff;
  }
  return acceptingStates[state] === 1 ? length : -1;
}
