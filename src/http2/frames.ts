// HTTP/2 wire constants and frame-header helpers (RFC 9113 §4, §6, §7, §11).

/** Frame type codes (RFC 9113 §6). */
export const FrameType = {
  data: 0x0,
  headers: 0x1,
  priority: 0x2,
  rstStream: 0x3,
  settings: 0x4,
  pushPromise: 0x5,
  ping: 0x6,
  goaway: 0x7,
  windowUpdate: 0x8,
  continuation: 0x9,
} as const;

/** Frame flags (RFC 9113 §6); the same bit means different things per type. */
export const Flag = {
  /** DATA, HEADERS: last frame the sender sends on the stream. */
  endStream: 0x1,
  /** SETTINGS, PING: acknowledgement. */
  ack: 0x1,
  /** HEADERS, CONTINUATION: the header block ends in this frame. */
  endHeaders: 0x4,
  /** DATA, HEADERS: a pad length byte and padding surround the payload. */
  padded: 0x8,
  /** HEADERS: an exclusive flag, stream dependency and weight precede the block. */
  priority: 0x20,
} as const;

/** Error codes of RST_STREAM and GOAWAY (RFC 9113 §7). */
export const ErrorCode = {
  noError: 0x0,
  protocolError: 0x1,
  internalError: 0x2,
  flowControlError: 0x3,
  settingsTimeout: 0x4,
  streamClosed: 0x5,
  frameSizeError: 0x6,
  refusedStream: 0x7,
  cancel: 0x8,
  compressionError: 0x9,
  connectError: 0xa,
  enhanceYourCalm: 0xb,
  inadequateSecurity: 0xc,
  http11Required: 0xd,
} as const;

/** Setting identifiers (RFC 9113 §6.5.2). */
export const SettingId = {
  headerTableSize: 0x1,
  enablePush: 0x2,
  maxConcurrentStreams: 0x3,
  initialWindowSize: 0x4,
  maxFrameSize: 0x5,
  maxHeaderListSize: 0x6,
} as const;

/** Size of a frame header in bytes (RFC 9113 §4.1). */
export const frameHeaderBytes = 9;

/** Flow-control windows start at 65,535 bytes for streams and the connection (§6.9.2). */
export const defaultWindowBytes = 65_535;

/** Largest flow-control window, 2^31 − 1 bytes (§6.9.1). */
export const maxWindowBytes = 0x7fff_ffff;

/** MAX_FRAME_SIZE bounds: 2^14 (the initial value) to 2^24 − 1 bytes (§6.5.2). */
export const minMaxFrameBytes = 16_384;
export const maxMaxFrameBytes = 0xff_ffff;

/** The 24-byte client connection preface (RFC 9113 §3.4). */
export const clientPreface = Buffer.from(
  "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
  "latin1",
);

/**
 * Writes a 9-byte frame header at `offset` of `target`: length (24 bits), type, flags,
 * stream id (31 bits, reserved bit 0).
 */
export function writeFrameHeader(
  target: Buffer,
  offset: number,
  length: number,
  type: number,
  flags: number,
  streamId: number,
): void {
  target[offset] = length >>> 16;
  target[offset + 1] = (length >>> 8) & 0xff;
  target[offset + 2] = length & 0xff;
  target[offset + 3] = type;
  target[offset + 4] = flags;
  target.writeUInt32BE(streamId & 0x7fff_ffff, offset + 5);
}

/** Names of the error codes, for logs and errors. */
export function errorCodeName(code: number): string {
  for (const [name, value] of Object.entries(ErrorCode))
    if (value === code) return name;
  return `0x${code.toString(16)}`;
}
