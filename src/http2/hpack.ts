import { decodeHuffman } from "./huffman.js";

// HPACK (RFC 7541) for our own HTTP/2 server: a decoder for request header blocks, with the
// dynamic table a connection needs, and a stateless encoder for response header blocks.

/**
 * A header block is malformed (RFC 7541 §2.3–§6); the connection must end with a
 * COMPRESSION_ERROR (RFC 7540 §4.3), since the peer's dynamic table no longer matches ours.
 */
export class HpackError extends Error {
  override readonly name = "HpackError";
}

/**
 * A decoded header list is larger than the SETTINGS_MAX_HEADER_LIST_SIZE we accept (RFC 7540
 * §6.5.2, §10.5.1). The block was decoded to its end first, so the dynamic table is still in sync
 * and the connection can go on; only the stream fails.
 */
export class HeaderListTooLargeError extends Error {
  override readonly name = "HeaderListTooLargeError";
  /** Size of the decoded list: sum of name + value + 32 octets per field. */
  readonly listSizeBytes: number;
  /** The bound it exceeded, in the same unit. */
  readonly maxListSizeBytes: number;
  constructor(listSizeBytes: number, maxListSizeBytes: number) {
    super(
      `header list of ${listSizeBytes} bytes exceeds the limit of ${maxListSizeBytes} bytes`,
    );
    this.listSizeBytes = listSizeBytes;
    this.maxListSizeBytes = maxListSizeBytes;
  }
}

// RFC 7541 Appendix A; entry i (1-based on the wire) is at i - 1.
const staticNames: readonly string[] = [
  ":authority",
  ":method",
  ":method",
  ":path",
  ":path",
  ":scheme",
  ":scheme",
  ":status",
  ":status",
  ":status",
  ":status",
  ":status",
  ":status",
  ":status",
  "accept-charset",
  "accept-encoding",
  "accept-language",
  "accept-ranges",
  "accept",
  "access-control-allow-origin",
  "age",
  "allow",
  "authorization",
  "cache-control",
  "content-disposition",
  "content-encoding",
  "content-language",
  "content-length",
  "content-location",
  "content-range",
  "content-type",
  "cookie",
  "date",
  "etag",
  "expect",
  "expires",
  "from",
  "host",
  "if-match",
  "if-modified-since",
  "if-none-match",
  "if-range",
  "if-unmodified-since",
  "last-modified",
  "link",
  "location",
  "max-forwards",
  "proxy-authenticate",
  "proxy-authorization",
  "range",
  "referer",
  "refresh",
  "retry-after",
  "server",
  "set-cookie",
  "strict-transport-security",
  "transfer-encoding",
  "user-agent",
  "vary",
  "via",
  "www-authenticate",
];
const staticValues: readonly string[] = staticNames.map((_, i) => {
  switch (i + 1) {
    case 2:
      return "GET";
    case 3:
      return "POST";
    case 4:
      return "/";
    case 5:
      return "/index.html";
    case 6:
      return "http";
    case 7:
      return "https";
    case 8:
      return "200";
    case 9:
      return "204";
    case 10:
      return "206";
    case 11:
      return "304";
    case 12:
      return "400";
    case 13:
      return "404";
    case 14:
      return "500";
    case 16:
      return "gzip, deflate";
    default:
      return "";
  }
});
const staticTableLength = staticNames.length; // 61

/** Per-entry overhead added to name + value octets (RFC 7541 §4.1); also the list-size overhead (RFC 7540 §6.5.2). */
const entryOverheadBytes = 32;
/** Largest integer we accept in a header block: 2^31 − 1 (RFC 7541 §5.1 leaves the bound to us). */
const maxInteger = 0x7fffffff;
/** Ring slots a decoder starts with: enough for the default 4096-byte table. */
const initialSlots = 128;
/** Longest unindexed literal value remembered for reuse (a request path), in octets. */
const lastLiteralMaxBytes = 256;

type Latin1Buffer = Buffer & {
  latin1Slice(start: number, end: number): string;
};

// Buffer#latin1Slice is what toString("latin1", s, e) calls after checking its arguments; it is
// undocumented, so fall back to toString where it is missing.
const latin1Slice: (buf: Buffer, start: number, end: number) => string =
  typeof (Buffer.prototype as Partial<Latin1Buffer>).latin1Slice === "function"
    ? (buf, start, end) => (buf as Latin1Buffer).latin1Slice(start, end)
    : (buf, start, end) => buf.toString("latin1", start, end);

/**
 * Decodes the header blocks of one HTTP/2 connection (RFC 7541 §3), keeping its dynamic table.
 * Header text is decoded as latin1: HTTP/2 field values are octets (RFC 7540 §8.1.2, §10.3).
 */
export class HpackDecoder {
  private readonly maxTableSizeBytes: number;
  /** Current table size limit, set by dynamic table size updates (RFC 7541 §4.2, §6.3). */
  private tableSizeLimitBytes: number;
  /** Sum of the entry sizes in the table (RFC 7541 §4.1). */
  private tableSizeBytes = 0;
  // The dynamic table is a ring: `head` is the slot the next entry goes to, the newest entry
  // (dynamic index 0, wire index 62) is at head - 1, the oldest at head - count. An entry takes
  // at least 32 bytes, so the ring never needs more than ⌊maxTableSize / 32⌋ slots; it starts
  // smaller (a huge advertised size must not allocate up front) and doubles when full.
  private capacity: number;
  private names: string[];
  private values: string[];
  private head = 0;
  private count = 0;
  /** Read position within the block being decoded. */
  private pos = 0;
  /** Reused output of Huffman decoding, grown on demand. */
  private scratch: Buffer = Buffer.allocUnsafe(256);
  // The last value of a literal that is not indexed, as sent (bytes) and decoded (text). Envoy's
  // encoder (nghttp2) never indexes :path, so every request carries the same Huffman-coded path;
  // comparing its bytes is cheaper than decoding them and returns the same string again.
  private readonly lastLiteralBytes: Buffer =
    Buffer.allocUnsafe(lastLiteralMaxBytes);
  private lastLiteralLength = -1;
  private lastLiteralHuffman = false;
  private lastLiteralText = "";

  /**
   * @param maxTableSize - the SETTINGS_HEADER_TABLE_SIZE we advertise, in bytes (RFC 7540
   *   §6.5.2); the peer may not make the dynamic table larger
   * @defaultValue maxTableSize 4096 (the protocol default)
   * @throws RangeError when `maxTableSize` is not an integer in [0, 2^31 − 1]
   */
  constructor(maxTableSize = 4096) {
    if (
      !Number.isInteger(maxTableSize) ||
      maxTableSize < 0 ||
      maxTableSize > maxInteger
    ) {
      throw new RangeError(
        `invalid maxTableSize ${maxTableSize}: expected an integer number of bytes in [0, 2^31 - 1]`,
      );
    }
    this.maxTableSizeBytes = maxTableSize;
    this.tableSizeLimitBytes = maxTableSize;
    this.capacity = Math.max(
      1,
      Math.min(initialSlots, Math.floor(maxTableSize / entryOverheadBytes)),
    );
    this.names = new Array<string>(this.capacity).fill("");
    this.values = new Array<string>(this.capacity).fill("");
  }

  /**
   * Decodes one complete header block (bytes `[start, end)` of `block`) into a flat list
   * `[name0, value0, name1, value1, …]` in wire order (RFC 7541 §3.2, §6). Dynamic table changes
   * persist to the next call. Fields served from a table return the stored strings.
   *
   * @param maxListSize - largest accepted header list: sum of name + value + 32 octets per field
   *   (SETTINGS_MAX_HEADER_LIST_SIZE, RFC 7540 §6.5.2)
   * @throws {@link HpackError} on malformed input: an integer that is truncated, over 2^31 − 1 or
   *   longer than 5 continuation bytes; a truncated string; bad Huffman data (EOS, padding over
   *   7 bits or not all ones); an index of 0 or past the tables; a table size update above the
   *   advertised maximum or after the first field
   * @throws {@link HeaderListTooLargeError} when the list exceeds `maxListSize`; thrown only after
   *   the whole block is decoded, so the dynamic table stays in sync
   * @throws RangeError when `[start, end)` is not within `block` (a caller bug, not bad input)
   */
  decode(
    block: Uint8Array,
    start: number,
    end: number,
    maxListSize: number,
  ): string[] {
    if (start < 0 || end > block.length || start > end) {
      throw new RangeError(
        `invalid range [${start}, ${end}) of a ${block.length}-byte block`,
      );
    }
    const buf = Buffer.isBuffer(block)
      ? block
      : Buffer.from(block.buffer, block.byteOffset, block.byteLength);
    const fields: string[] = [];
    let listSizeBytes = 0;
    let fieldSeen = false;
    this.pos = start;
    while (this.pos < end) {
      const first = buf[this.pos] ?? 0;
      let name: string;
      let value: string;
      if (first >= 0x80) {
        // Indexed header field (RFC 7541 §6.1).
        const index = this.readInteger(buf, end, 0x7f);
        if (index === 0) throw new HpackError("header field index 0");
        if (index <= staticTableLength) {
          name = staticNames[index - 1] ?? "";
          value = staticValues[index - 1] ?? "";
        } else {
          const slot = this.slotOf(index);
          name = this.names[slot] ?? "";
          value = this.values[slot] ?? "";
        }
      } else if (first >= 0x40) {
        // Literal with incremental indexing (RFC 7541 §6.2.1).
        const index = this.readInteger(buf, end, 0x3f);
        name = index === 0 ? this.readString(buf, end) : this.nameAt(index);
        value = this.readString(buf, end);
        this.insert(name, value);
      } else if (first >= 0x20) {
        // Dynamic table size update (RFC 7541 §6.3): only at the start of a block (§4.2).
        if (fieldSeen) {
          throw new HpackError(
            "dynamic table size update after a header field",
          );
        }
        const sizeBytes = this.readInteger(buf, end, 0x1f);
        if (sizeBytes > this.maxTableSizeBytes) {
          throw new HpackError(
            `dynamic table size update to ${sizeBytes} bytes exceeds the advertised ${this.maxTableSizeBytes}`,
          );
        }
        this.tableSizeLimitBytes = sizeBytes;
        this.evictTo(sizeBytes);
        continue;
      } else {
        // Literal without indexing (0000) or never indexed (0001) (RFC 7541 §6.2.2, §6.2.3).
        const index = this.readInteger(buf, end, 0x0f);
        name = index === 0 ? this.readString(buf, end) : this.nameAt(index);
        value = this.readUnindexedValue(buf, end);
      }
      fieldSeen = true;
      listSizeBytes += name.length + value.length + entryOverheadBytes;
      // Past the limit, keep decoding (the table must stay in sync) but stop collecting.
      if (listSizeBytes <= maxListSize) fields.push(name, value);
    }
    if (listSizeBytes > maxListSize) {
      throw new HeaderListTooLargeError(listSizeBytes, maxListSize);
    }
    return fields;
  }

  /** Reads an integer with a prefix of `mask` bits (RFC 7541 §5.1) at `this.pos`. */
  private readInteger(buf: Buffer, end: number, mask: number): number {
    let pos = this.pos;
    if (pos >= end) throw new HpackError("truncated integer");
    let value = (buf[pos++] ?? 0) & mask;
    if (value === mask) {
      // Continuation bytes, 7 bits each, least significant first; at most 5 of them.
      let shift = 0;
      for (;;) {
        if (pos >= end) throw new HpackError("truncated integer");
        const byte = buf[pos++] ?? 0;
        value += (byte & 0x7f) * 2 ** shift;
        if (byte < 0x80) break;
        shift += 7;
        if (shift > 28) {
          throw new HpackError("integer longer than 5 continuation bytes");
        }
      }
      if (value > maxInteger) {
        throw new HpackError(`integer ${value} exceeds 2^31 - 1`);
      }
    }
    this.pos = pos;
    return value;
  }

  /** Reads a string literal (RFC 7541 §5.2) at `this.pos`, raw or Huffman-coded. */
  private readString(buf: Buffer, end: number): string {
    const huffman = this.pos < end && (buf[this.pos] ?? 0) >= 0x80;
    const length = this.readInteger(buf, end, 0x7f);
    const start = this.pos;
    const stop = start + length;
    if (stop > end) throw new HpackError("truncated string literal");
    this.pos = stop;
    return huffman
      ? this.decodeHuffmanString(buf, start, stop)
      : latin1Slice(buf, start, stop);
  }

  /**
   * Reads the value of a literal that is not indexed, like {@link readString}, but answers a
   * repeat of the previous such value with the previous string.
   */
  private readUnindexedValue(buf: Buffer, end: number): string {
    const huffman = this.pos < end && (buf[this.pos] ?? 0) >= 0x80;
    const length = this.readInteger(buf, end, 0x7f);
    const start = this.pos;
    const stop = start + length;
    if (stop > end) throw new HpackError("truncated string literal");
    this.pos = stop;
    const last = this.lastLiteralBytes;
    if (
      length === this.lastLiteralLength &&
      huffman === this.lastLiteralHuffman
    ) {
      let i = 0;
      while (i < length && last[i] === buf[start + i]) i++;
      if (i === length) return this.lastLiteralText;
    }
    const text = huffman
      ? this.decodeHuffmanString(buf, start, stop)
      : latin1Slice(buf, start, stop);
    if (length <= lastLiteralMaxBytes) {
      buf.copy(last, 0, start, stop);
      this.lastLiteralLength = length;
      this.lastLiteralHuffman = huffman;
      this.lastLiteralText = text;
    }
    return text;
  }

  /** Decodes the Huffman-coded octets `buf[start, stop)` (RFC 7541 §5.2) as latin1 text. */
  private decodeHuffmanString(
    buf: Buffer,
    start: number,
    stop: number,
  ): string {
    // The shortest code is 5 bits, which bounds the output.
    const maxOutput = Math.floor(((stop - start) * 8) / 5);
    if (this.scratch.length < maxOutput) {
      this.scratch = Buffer.allocUnsafe(
        Math.max(maxOutput, this.scratch.length * 2),
      );
    }
    const written = decodeHuffman(buf, start, stop, this.scratch);
    if (written < 0) throw new HpackError("invalid Huffman-coded string");
    return latin1Slice(this.scratch, 0, written);
  }

  /** The name of the field at wire index `index` (≥ 1) of either table. */
  private nameAt(index: number): string {
    if (index <= staticTableLength) return staticNames[index - 1] ?? "";
    return this.names[this.slotOf(index)] ?? "";
  }

  /** The ring slot of wire index `index` (> 61), checked against the table's entry count. */
  private slotOf(index: number): number {
    const dynamicIndex = index - staticTableLength - 1;
    if (dynamicIndex >= this.count) {
      throw new HpackError(
        `header field index ${index} is past the table (${staticTableLength + this.count} entries)`,
      );
    }
    const slot = this.head - 1 - dynamicIndex;
    return slot < 0 ? slot + this.capacity : slot;
  }

  /** Adds an entry, evicting the oldest ones to make room (RFC 7541 §4.4). */
  private insert(name: string, value: string): void {
    const sizeBytes = name.length + value.length + entryOverheadBytes;
    if (sizeBytes > this.tableSizeLimitBytes) {
      // An entry larger than the table empties it and is not added.
      this.evictTo(0);
      return;
    }
    this.evictTo(this.tableSizeLimitBytes - sizeBytes);
    if (this.count === this.capacity) this.grow();
    const slot = this.head;
    this.names[slot] = name;
    this.values[slot] = value;
    this.head = slot + 1 === this.capacity ? 0 : slot + 1;
    this.count++;
    this.tableSizeBytes += sizeBytes;
  }

  /** Doubles the ring, moving the entries to slots 0 … count − 1, oldest first. */
  private grow(): void {
    const capacity = this.capacity * 2;
    const names = new Array<string>(capacity).fill("");
    const values = new Array<string>(capacity).fill("");
    for (let i = 0; i < this.count; i++) {
      const slot = (this.head + i) % this.capacity; // full ring: the oldest is at head
      names[i] = this.names[slot] ?? "";
      values[i] = this.values[slot] ?? "";
    }
    this.names = names;
    this.values = values;
    this.head = this.count;
    this.capacity = capacity;
  }

  /** Evicts the oldest entries until the table holds at most `sizeBytes` (RFC 7541 §4.3). */
  private evictTo(sizeBytes: number): void {
    while (this.tableSizeBytes > sizeBytes) {
      let slot = this.head - this.count;
      if (slot < 0) slot += this.capacity;
      this.tableSizeBytes -=
        (this.names[slot] ?? "").length +
        (this.values[slot] ?? "").length +
        entryOverheadBytes;
      // Drop the references so evicted strings can be collected.
      this.names[slot] = "";
      this.values[slot] = "";
      this.count--;
    }
  }
}

// Encoder lookups: the index of each exact (name, value) entry and the first index of each name
// in the static table.
const staticFieldIndex = new Map<string, Map<string, number>>();
const staticNameIndex = new Map<string, number>();
for (let i = 1; i <= staticTableLength; i++) {
  const name = staticNames[i - 1] ?? "";
  let byValue = staticFieldIndex.get(name);
  if (byValue === undefined) {
    byValue = new Map();
    staticFieldIndex.set(name, byValue);
    staticNameIndex.set(name, i);
  }
  byValue.set(staticValues[i - 1] ?? "", i);
}

/** Octets an integer takes with an N-bit prefix whose mask is `mask` (RFC 7541 §5.1). */
function integerLength(value: number, mask: number): number {
  if (value < mask) return 1;
  let length = 2;
  for (let rest = value - mask; rest >= 0x80; rest = Math.floor(rest / 128)) {
    length++;
  }
  return length;
}

/** Writes an integer with prefix `mask` and the pattern bits `flags`; returns the new offset. */
function writeInteger(
  out: Buffer,
  offset: number,
  value: number,
  mask: number,
  flags: number,
): number {
  if (value < mask) {
    out[offset++] = flags | value;
    return offset;
  }
  out[offset++] = flags | mask;
  let rest = value - mask;
  while (rest >= 0x80) {
    out[offset++] = (rest & 0x7f) | 0x80;
    rest = Math.floor(rest / 128);
  }
  out[offset++] = rest;
  return offset;
}

/** Writes a raw (non-Huffman) string literal (RFC 7541 §5.2); returns the new offset. */
function writeString(out: Buffer, offset: number, text: string): number {
  offset = writeInteger(out, offset, text.length, 0x7f, 0);
  return offset + out.write(text, offset, "latin1");
}

// Names must be lower case (RFC 7540 §8.1.2) and all text one octet per character.
const badName = /[A-Z\u0100-\uffff]/;
const badValue = /[\u0100-\uffff]/;

/**
 * Encodes header fields for a response (RFC 7541 §6): exact static-table matches (such as
 * `:status: 200`) as indexed fields, everything else as literals without indexing with raw
 * (non-Huffman) strings and the static name index where there is one. Never uses a dynamic
 * table, so a block can be precomputed once and sent on any connection.
 *
 * @param fields - `[name, value]` pairs in wire order; names lower case, all text latin1 (one
 *   octet per character)
 * @returns the header block fragment, ready for HEADERS/CONTINUATION frames
 * @throws RangeError when a name has upper-case letters or any text has characters above U+00FF
 */
export function encodeHeaderBlock(
  fields: readonly (readonly [string, string])[],
): Buffer {
  let length = 0;
  for (const [name, value] of fields) {
    if (badName.test(name) || badValue.test(value)) {
      throw new RangeError(
        `header ${JSON.stringify(name)}: names must be lower case and text latin1`,
      );
    }
    if (staticFieldIndex.get(name)?.get(value) !== undefined) {
      length += 1; // every static index is < 127
      continue;
    }
    const nameIndex = staticNameIndex.get(name);
    length +=
      nameIndex === undefined
        ? 1 + integerLength(name.length, 0x7f) + name.length
        : integerLength(nameIndex, 0x0f);
    length += integerLength(value.length, 0x7f) + value.length;
  }
  const out = Buffer.allocUnsafe(length);
  let offset = 0;
  for (const [name, value] of fields) {
    const fieldIndex = staticFieldIndex.get(name)?.get(value);
    if (fieldIndex !== undefined) {
      out[offset++] = 0x80 | fieldIndex;
      continue;
    }
    const nameIndex = staticNameIndex.get(name);
    if (nameIndex === undefined) {
      out[offset++] = 0;
      offset = writeString(out, offset, name);
    } else {
      offset = writeInteger(out, offset, nameIndex, 0x0f, 0);
    }
    offset = writeString(out, offset, value);
  }
  return out;
}
