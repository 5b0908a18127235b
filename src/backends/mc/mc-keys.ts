/**
 * The memcached key and expiration rules the backend applies before any byte is sent. Ours
 * because the protocol does not give them: binary-protocol keys are length-prefixed, so
 * memcached stores keys with whitespace that the reference's text-protocol client refuses
 * (both services must store the same keys); memcached rejects keys over 250 bytes only with a
 * reply error, which would fail the request open instead of naming the entry; and it reads an
 * expiration over 30 days as a Unix time, so a relative one would expire at once. Parity:
 * upstream's gomemcache `legalKey`; memcached `protocol.txt` ("Keys", "Expiration times").
 */

/** Longest key the memcached protocol accepts, in bytes (upstream gomemcache `legalKey`). */
export const maxMcKeyBytes = 250;

/**
 * Longest expiration memcached takes as relative seconds: 30 days. Larger values are read as
 * an absolute Unix time (memcached `protocol.txt`, "Expiration times").
 */
export const maxRelativeExpirationSeconds = 2_592_000;

/** Why a key cannot be stored in memcached, if it cannot. */
export type McKeyProblem = "too-long" | "illegal-character";

/**
 * Returns why `key` is not a legal memcached key, or `undefined` when it is: longer than
 * {@link maxMcKeyBytes} bytes of UTF-8, or containing a byte ≤ 0x20 (space, control
 * characters) or 0x7f. Same rule as upstream's client (gomemcache `legalKey`), which the text
 * protocol needs; we apply it too so both services store the same keys.
 */
export function mcKeyProblem(key: string): McKeyProblem | undefined {
  if (key.length > maxMcKeyBytes) return "too-long";
  let ascii = true;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c <= 0x20 || c === 0x7f) return "illegal-character";
    if (c >= 0x80) ascii = false;
  }
  // Non-ASCII characters take 2–4 bytes in UTF-8; only then can bytes exceed characters.
  if (!ascii && Buffer.byteLength(key) > maxMcKeyBytes) return "too-long";
  return undefined;
}

/**
 * Whether `text` holds a character memcached keys cannot: whitespace or a control character
 * (code ≤ 0x20 or 0x7f). Used to name the culprit of an illegal key, and to check
 * `CACHE_KEY_PREFIX` at startup.
 */
export function hasIllegalKeyCharacter(text: string): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c <= 0x20 || c === 0x7f) return true;
  }
  return false;
}

/**
 * Returns the expiration field to send for a counter that should live `expirationSeconds`:
 * the seconds themselves up to 30 days, otherwise the absolute Unix time `nowSeconds +
 * expirationSeconds`, because memcached reads values over 30 days as a timestamp. (The
 * reference sends the relative value, so its MONTH and YEAR counters expire at once;
 * docs/reference-parity.md#mc-expiry.)
 *
 * @param expirationSeconds - lifetime in seconds, ≥ 0
 * @param nowSeconds - seconds since the Unix epoch
 */
export function toMcExpiration(
  expirationSeconds: number,
  nowSeconds: number,
): number {
  return expirationSeconds > maxRelativeExpirationSeconds
    ? nowSeconds + expirationSeconds
    : expirationSeconds;
}
