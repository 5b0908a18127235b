import type { Clock } from "../util/clock.js";

/** Options of {@link CircuitBreaker}. */
export interface CircuitBreakerOptions {
  /**
   * Consecutive failures (errors or timeouts) that open the circuit
   * (`BACKEND_FAILURE_THRESHOLD`), integer ≥ 1. @defaultValue 3
   */
  readonly failureThreshold?: number;
  /**
   * Time between probes while the circuit is open, in milliseconds (`BACKEND_PROBE_INTERVAL`),
   * > 0. @defaultValue 500
   */
  readonly probeIntervalMs?: number;
  /** Time source of the probe schedule (`nowMs`). */
  readonly clock: Clock;
}

/**
 * The circuit breaker of the kv or mc backend (docs/failure-modes.md#the-circuit-breaker), as a
 * state machine that neither calls the backend nor logs: the {@link BackendGuard} reports each
 * call's outcome and acts on the transitions.
 *
 * - closed: a success resets the failure count; `failureThreshold` consecutive failures open
 *   the circuit;
 * - open: no request goes to the backend but one probe at a time, the first one due
 *   `probeIntervalMs` after the circuit opened or after the last probe started; a probe's
 *   success closes the circuit, its failure schedules the next probe.
 *
 * The closed case costs one property read ({@link CircuitBreaker.open}) and, after the call, one
 * write ({@link CircuitBreaker.recordSuccess}).
 */
export class CircuitBreaker {
  /** Consecutive failures that open the circuit, integer ≥ 1. */
  readonly threshold: number;
  /** Time between probe starts while open, in milliseconds. */
  readonly probeIntervalMs: number;
  private readonly clock: Clock;
  private failures = 0;
  private isOpen = false;
  private probing = false;
  private nextProbeAtMs = 0;
  private probeStartedAtMs = 0;

  /**
   * @throws {@link RangeError} when `failureThreshold` is not an integer ≥ 1 or
   *   `probeIntervalMs` is not > 0 (naming the option)
   */
  constructor(options: CircuitBreakerOptions) {
    this.threshold = options.failureThreshold ?? 3;
    this.probeIntervalMs = options.probeIntervalMs ?? 500;
    if (!Number.isInteger(this.threshold) || this.threshold < 1)
      throw new RangeError(
        `invalid failureThreshold ${this.threshold}: expected an integer ≥ 1`,
      );
    if (!(this.probeIntervalMs > 0))
      throw new RangeError(
        `invalid probeIntervalMs ${this.probeIntervalMs}: expected > 0`,
      );
    this.clock = options.clock;
  }

  /** Whether the circuit is open (requests are answered without the backend but probes). */
  get open(): boolean {
    return this.isOpen;
  }

  /** Failures since the last success (a concurrent call's success resets it even while open). */
  get consecutiveFailures(): number {
    return this.failures;
  }

  /**
   * Starts a probe when the circuit is open, no probe is running and one is due; the caller
   * then calls the backend and reports {@link probeSucceeded}, {@link probeFailed} or
   * {@link abandonProbe}.
   *
   * @returns whether this request is the probe
   */
  startProbe(): boolean {
    if (!this.isOpen || this.probing) return false;
    const now = this.clock.nowMs();
    if (now < this.nextProbeAtMs) return false;
    this.probing = true;
    this.probeStartedAtMs = now;
    return true;
  }

  /** A call other than a probe succeeded: failures must be consecutive to open the circuit. */
  recordSuccess(): void {
    this.failures = 0;
  }

  /**
   * A call other than a probe failed: counts it, and opens the circuit at the threshold (the
   * first probe is due one interval later).
   *
   * @returns whether this failure opened the circuit
   */
  recordFailure(): boolean {
    this.failures++;
    if (this.isOpen || this.failures < this.threshold) return false;
    this.isOpen = true;
    this.nextProbeAtMs = this.clock.nowMs() + this.probeIntervalMs;
    return true;
  }

  /**
   * The probe succeeded: the circuit closes and the failure count restarts.
   *
   * @returns whether the circuit closed (false when it was not open)
   */
  probeSucceeded(): boolean {
    this.probing = false;
    this.failures = 0;
    if (!this.isOpen) return false;
    this.isOpen = false;
    return true;
  }

  /**
   * The probe failed: counts the failure and schedules the next probe. Probes start one
   * interval apart (start to start), so a store that comes back is found within one interval
   * plus the probe's own round trip.
   */
  probeFailed(): void {
    this.probing = false;
    this.failures++;
    this.nextProbeAtMs = this.probeStartedAtMs + this.probeIntervalMs;
  }

  /** The probe ended in an error that is not the backend's (a bad cache key): nothing counts. */
  abandonProbe(): void {
    this.probing = false;
  }
}
