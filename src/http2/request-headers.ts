// Validation of request header lists (RFC 9113 §8.2, §8.3): what makes an HTTP/2 request
// malformed. A malformed request is a stream error PROTOCOL_ERROR (§8.1.1), never an
// exception: whatever HPACK decoded reaches no other code unless it passed here.

/** Pseudo-header fields and content-length of a valid request. */
export interface RequestPseudoHeaders {
  readonly method: string;
  readonly path: string;
  readonly scheme: string;
  readonly authority: string;
  /** -1 when absent. */
  readonly contentLength: number;
  /**
   * Size of the header list as RFC 9113 §6.5.2 counts it (name + value + 32 octets per
   * field), in bytes: what the request holds in memory, for the connection's budget.
   */
  readonly listBytes: number;
}

/**
 * Header fields that belong to HTTP/1.1 connections (RFC 9113 §8.2.2): they make an HTTP/2
 * request malformed, and a response must not carry them.
 */
export const connectionSpecific: ReadonlySet<string> = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "upgrade",
]);

/**
 * Octets allowed in a regular field name: RFC 9110 §5.6.2 `token` characters, lower case only
 * (RFC 9113 §8.2.1 forbids 0x00–0x20, 0x41–0x5a and 0x7f–0xff; the token rule, which nghttp2
 * and Go's x/net apply too, also rules out separators such as `(` or `"`, which the WHATWG
 * `Headers` class our Connect router uses would throw on).
 */
const nameOctet = new Uint8Array(256);
for (const c of "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz")
  nameOctet[c.charCodeAt(0)] = 1;

/** Whether `name` is a valid regular field name: non-empty, lower-case token characters. */
export function isValidFieldName(name: string): boolean {
  const n = name.length;
  if (n === 0) return false;
  for (let i = 0; i < n; i++) {
    const c = name.charCodeAt(i);
    if (c > 0xff || nameOctet[c] !== 1) return false;
  }
  return true;
}

/**
 * Whether `value` is a valid field value (RFC 9113 §8.2.1): no NUL, LF or CR anywhere, no
 * leading or trailing space or tab, octets only (HPACK text is decoded as latin1, so every
 * character is ≤ 0xff already; checked anyway).
 */
export function isValidFieldValue(value: string): boolean {
  const n = value.length;
  if (n === 0) return true;
  let c = value.charCodeAt(0);
  if (c === 0x20 || c === 0x09) return false;
  c = value.charCodeAt(n - 1);
  if (c === 0x20 || c === 0x09) return false;
  // A regular expression scans ~10× faster than a charCodeAt loop (measured on Node 24).
  return !forbiddenInValue.test(value);
}

/** NUL, LF, CR, or a character beyond one octet. */
const forbiddenInValue = /[\0\n\r\u0100-\uffff]/;

const contentLengthPattern = /^\d{1,15}$/;

/**
 * Checks a request header list (RFC 9113 §8.2, §8.3): pseudo-header fields first, only the
 * request ones and each once; regular names lower-case tokens, values without NUL/CR/LF or
 * surrounding whitespace; no connection-specific fields; `te` only "trailers"; one
 * content-length value; `:method` a token, `:scheme` and a non-empty `:path` present (CONNECT
 * is not served).
 *
 * @param fields - `[name0, value0, name1, value1, …]` as HPACK decoded them
 * @returns the pseudo-header fields, or `undefined` when the request is malformed
 */
export function parseRequestHeaders(
  fields: readonly string[],
): RequestPseudoHeaders | undefined {
  let method: string | undefined;
  let path: string | undefined;
  let scheme: string | undefined;
  let authority: string | undefined;
  let host: string | undefined;
  let contentLength = -1;
  let regular = false;
  let listBytes = 0;
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i] ?? "";
    const value = fields[i + 1] ?? "";
    listBytes += name.length + value.length + 32;
    if (!isValidFieldValue(value)) return undefined;
    if (name.charCodeAt(0) === 0x3a /* : */) {
      if (regular) return undefined;
      switch (name) {
        case ":method":
          if (method !== undefined || !isToken(value)) return undefined;
          method = value;
          break;
        case ":path":
          if (path !== undefined) return undefined;
          path = value;
          break;
        case ":scheme":
          if (scheme !== undefined) return undefined;
          scheme = value;
          break;
        case ":authority":
          if (authority !== undefined) return undefined;
          authority = value;
          break;
        default:
          return undefined;
      }
      continue;
    }
    regular = true;
    if (!isValidFieldName(name)) return undefined;
    if (connectionSpecific.has(name)) return undefined;
    if (name === "te" && value !== "trailers") return undefined;
    if (name === "host") host = value;
    if (name === "content-length") {
      if (!contentLengthPattern.test(value)) return undefined;
      const n = Number(value);
      if (contentLength >= 0 && contentLength !== n) return undefined;
      contentLength = n;
    }
  }
  if (
    method === undefined ||
    scheme === undefined ||
    path === undefined ||
    path === ""
  )
    return undefined;
  return {
    method,
    path,
    scheme,
    authority: authority ?? host ?? "",
    contentLength,
    listBytes,
  };
}

/** Whether a trailer list is valid: regular fields only, valid names and values (§8.1). */
export function isValidTrailers(fields: readonly string[]): boolean {
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i] ?? "";
    if (!isValidFieldName(name) || !isValidFieldValue(fields[i + 1] ?? ""))
      return false;
    if (connectionSpecific.has(name)) return false;
  }
  return true;
}

/** A method name: a non-empty token (RFC 9110 §9.1); upper case allowed. */
function isToken(value: string): boolean {
  const n = value.length;
  if (n === 0) return false;
  for (let i = 0; i < n; i++) {
    const c = value.charCodeAt(i);
    if (c >= 0x41 && c <= 0x5a) continue;
    if (c > 0xff || nameOctet[c] !== 1) return false;
  }
  return true;
}
