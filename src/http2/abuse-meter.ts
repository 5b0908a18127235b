// What one HTTP/2 connection's peer makes it do without progress, measured against the abuse
// limits of limits.ts: the flood score, the stream reset token bucket and the PING strikes.
// The meter only counts; the connection ends itself (GOAWAY ENHANCE_YOUR_CALM) when a method
// says a limit is exceeded.

/** PING strikes tolerated; one more ends the connection (grpc-go's `maxPingStrikes`). */
const maxPingStrikes = 2;

/** Limits of an {@link AbuseMeter}; see `http2LimitDefaults` for each one's meaning. */
export interface AbuseMeterLimits {
  /** Flood score beyond which the connection is ended. */
  readonly floodLimit: number;
  /** Flood score decay, per second. */
  readonly floodDecayPerSecond: number;
  /** Stream resets accepted at once, and refilled per second. */
  readonly streamResetLimit: {
    readonly burst: number;
    readonly ratePerSecond: number;
  };
  /** PING enforcement, in ms; 0 disables. */
  readonly keepaliveMinTimeMs: number;
}

/** Flood score, reset token bucket and PING strikes of one connection (see the file comment). */
export class AbuseMeter {
  private readonly nowMs: () => number;
  private readonly floodLimit: number;
  private readonly floodDecayPerMs: number;
  /** Flood score (see http2LimitDefaults.floodLimit) and when it last decayed. */
  private floodScore = 0;
  private floodAtMs: number;
  private readonly resetBurst: number;
  private readonly resetRatePerMs: number;
  private resetTokens: number;
  private resetRefilledAtMs: number;
  private readonly keepaliveMinTimeMs: number;
  /** PING enforcement (grpc-go's keepalive policy). */
  private lastPingAtMs = Number.NEGATIVE_INFINITY;
  private pingStrikes = 0;

  /**
   * @param nowMs monotonic clock, in ms
   * @param startMs when the connection started, on that clock
   */
  constructor(limits: AbuseMeterLimits, nowMs: () => number, startMs: number) {
    this.nowMs = nowMs;
    this.floodLimit = limits.floodLimit;
    this.floodDecayPerMs = limits.floodDecayPerSecond / 1000;
    this.resetBurst = limits.streamResetLimit.burst;
    this.resetRatePerMs = limits.streamResetLimit.ratePerSecond / 1000;
    this.resetTokens = limits.streamResetLimit.burst;
    this.keepaliveMinTimeMs = limits.keepaliveMinTimeMs;
    this.resetRefilledAtMs = startMs;
    this.floodAtMs = startMs;
  }

  /**
   * Adds `points` to the flood score (frames that make no progress, refused and malformed
   * streams), after its decay since the last call. @returns whether the score is now beyond
   * the limit
   */
  flood(points: number): boolean {
    const now = this.nowMs();
    const score = Math.max(
      0,
      this.floodScore - (now - this.floodAtMs) * this.floodDecayPerMs,
    );
    this.floodAtMs = now;
    this.floodScore = score + points;
    return this.floodScore > this.floodLimit;
  }

  /** A response was sent: progress, which pays for some of the flood score. */
  responded(): void {
    if (this.floodScore > 0)
      this.floodScore = Math.max(0, this.floodScore - 10);
  }

  /** Takes a token for a stream reset by the peer. @returns false when none is left */
  takeResetToken(): boolean {
    const now = this.nowMs();
    this.resetTokens = Math.min(
      this.resetBurst,
      this.resetTokens + (now - this.resetRefilledAtMs) * this.resetRatePerMs,
    );
    this.resetRefilledAtMs = now;
    if (this.resetTokens < 1) return false;
    this.resetTokens -= 1;
    return true;
  }

  /**
   * Counts a PING (not an ACK) by grpc-go's keepalive enforcement: one sooner than
   * `keepaliveMinTimeMs` after the previous one with no response sent in between
   * (`respondedSincePing`) is a strike. @returns whether the strikes are now beyond the limit
   * (never when the enforcement is disabled)
   */
  tooManyPings(respondedSincePing: boolean): boolean {
    if (this.keepaliveMinTimeMs <= 0) return false;
    const now = this.nowMs();
    if (respondedSincePing) {
      this.pingStrikes = 0;
    } else if (now - this.lastPingAtMs < this.keepaliveMinTimeMs) {
      this.pingStrikes++;
    }
    this.lastPingAtMs = now;
    return this.pingStrikes > maxPingStrikes;
  }
}
