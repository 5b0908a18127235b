// Cluster slot of a key: CRC16 (XMODEM: polynomial 0x1021, initial value 0) of the key's
// UTF-8 bytes, or of its hash tag, modulo 16384, as the cluster specification defines it.

const crcTable = new Uint16Array(256);
for (let i = 0; i < 256; i++) {
  let crc = i << 8;
  for (let bit = 0; bit < 8; bit++) {
    crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  crcTable[i] = crc;
}

function crc16(bytes: Uint8Array, start: number, end: number): number {
  let crc = 0;
  for (let i = start; i < end; i++) {
    crc = ((crc << 8) & 0xffff) ^ crcTable[((crc >> 8) ^ bytes[i]!) & 0xff]!;
  }
  return crc;
}

/** Number of hash slots of a cluster. */
export const clusterSlotCount = 16384;

/**
 * Returns the cluster hash slot (0–16383) of a cache key. When the key holds a non-empty hash
 * tag (`{…}`, first `{` and the first `}` after it), only the tag is hashed.
 */
export function keySlot(cacheKey: string): number {
  const bytes = Buffer.from(cacheKey, "utf8");
  let start = 0;
  let end = bytes.length;
  const open = bytes.indexOf(0x7b); // "{"
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1); // "}"
    if (close > open + 1) {
      start = open + 1;
      end = close;
    }
  }
  return crc16(bytes, start, end) % clusterSlotCount;
}
