import { describe, expect, it } from "vitest";
import {
  movedKeysRatio,
  nodeIndexForKey,
} from "../../../../src/backends/mc/mc-client.js";

/** Bitwise CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), independent of zlib. */
function crc32Reference(text: string): number {
  let crc = 0xffffffff;
  for (const byte of Buffer.from(text, "utf8")) {
    crc ^= byte;
    for (let bit = 0; bit < 8; bit++) {
      crc = crc & 1 ? (crc >>> 1) ^ 0xedb88320 : crc >>> 1;
    }
  }
  return (crc ^ 0xffffffff) >>> 0;
}

describe("nodeIndexForKey", () => {
  it("uses CRC-32 IEEE of the key's UTF-8 bytes, as Go's crc32.ChecksumIEEE", () => {
    // Standard check value of CRC-32/ISO-HDLC, and Go's ChecksumIEEE("hello").
    expect(crc32Reference("123456789")).toBe(0xcbf43926);
    expect(crc32Reference("hello")).toBe(0x3610a686);
    expect(nodeIndexForKey("123456789", 7)).toBe(0xcbf43926 % 7);
  });

  it.each([
    "domain_key_value_1234",
    "prefix:domain_key2_value2_subkey2_subvalue2_1200",
    "d_k_ünïcødé_60",
    "d_k__0",
  ])("maps %j to checksum modulo the node count", (cacheKey) => {
    for (const nodeCount of [2, 3, 5, 16]) {
      expect(nodeIndexForKey(cacheKey, nodeCount)).toBe(
        crc32Reference(cacheKey) % nodeCount,
      );
    }
  });

  it("always picks the only node of a one-node list", () => {
    expect(nodeIndexForKey("anything", 1)).toBe(0);
  });

  it("spreads keys over the nodes", () => {
    const counts = [0, 0, 0];
    for (let i = 0; i < 3000; i++)
      counts[nodeIndexForKey(`d_k_v${i}_60`, 3)]!++;
    for (const count of counts) expect(count).toBeGreaterThan(850);
  });
});

describe("movedKeysRatio", () => {
  it("is 0 for the same list and 1 from or to an empty one", () => {
    expect(movedKeysRatio(["a", "b"], ["a", "b"])).toBe(0);
    expect(movedKeysRatio([], ["a"])).toBe(1);
    expect(movedKeysRatio(["a"], [])).toBe(1);
  });

  it("counts the share of checksum residues whose node changes", () => {
    expect(movedKeysRatio(["a", "b"], ["a", "c"])).toBe(0.5);
    expect(movedKeysRatio(["a", "b"], ["a", "b", "c"])).toBeCloseTo(4 / 6);
    expect(movedKeysRatio(["a", "b", "c"], ["b", "c"])).toBeCloseTo(4 / 6);
  });
});
