/** Names of the health components (spec "Health" table). */
export type HealthComponent = "backend" | "config" | "sigterm" | "startup";

/** Receives the overall health after every change of it. */
export type HealthListener = (healthy: boolean) => void;

/**
 * Tracks named health components; overall healthy only when every registered component is.
 * Backends, providers and the service write it; servers read it.
 */
export class HealthChecker {
  private readonly states = new Map<HealthComponent, boolean>();
  private readonly listeners = new Set<HealthListener>();
  /** Components whose failure degrades the service instead of making it unhealthy. */
  private readonly tolerated = new Set<HealthComponent>();
  /** Components reported degraded with {@link setDegraded}. */
  private readonly degraded = new Set<HealthComponent>();
  /** Why a component is unhealthy, when it says (shown by `/healthcheck`). */
  private readonly reasons = new Map<HealthComponent, string>();
  private healthy: boolean;

  /** @param components - the enabled components with their initial state */
  constructor(
    components: readonly { name: HealthComponent; healthy: boolean }[],
  ) {
    for (const c of components) this.states.set(c.name, c.healthy);
    this.healthy = this.compute();
  }

  /**
   * Adds a component (or resets an existing one) with its initial state; a backend registers
   * its own component when it is created.
   */
  register(name: HealthComponent, healthy: boolean): void {
    this.states.set(name, healthy);
    const overall = this.compute();
    if (overall === this.healthy) return;
    this.healthy = overall;
    for (const listener of this.listeners) listener(overall);
  }

  /** Marks a registered component healthy; unknown components are ignored. */
  ok(name: HealthComponent): void {
    this.set(name, true);
  }

  /** Marks a registered component unhealthy; unknown components are ignored. */
  fail(name: HealthComponent): void {
    this.set(name, false);
  }

  /**
   * Makes a failing `name` count as degraded rather than unhealthy: the service still answers
   * without it (a backend under `BACKEND_FAILURE_MODE` allow, deny or local), so `/healthcheck`
   * stays 200 and the gRPC health service SERVING (docs/failure-modes.md).
   */
  tolerate(name: HealthComponent): void {
    this.tolerated.add(name);
    const overall = this.compute();
    if (overall === this.healthy) return;
    this.healthy = overall;
    for (const listener of this.listeners) listener(overall);
  }

  /**
   * Marks `name` degraded or not: the service answers without it (the backend circuit breaker
   * is open). Does not change {@link isHealthy}.
   */
  setDegraded(name: HealthComponent, degraded: boolean): void {
    if (degraded) this.degraded.add(name);
    else this.degraded.delete(name);
  }

  /**
   * Components the service currently runs without: those marked with {@link setDegraded} and
   * tolerated ones that fail; empty when fully up.
   */
  degradedComponents(): HealthComponent[] {
    const out = new Set(this.degraded);
    for (const name of this.tolerated)
      if (this.states.get(name) === false) out.add(name);
    return [...out];
  }

  /**
   * Sets (or, with undefined, clears) the text explaining why `name` is unhealthy, e.g.
   * `waiting for the kv store`; `/healthcheck` shows it after the component's name.
   */
  setReason(name: HealthComponent, reason: string | undefined): void {
    if (reason === undefined) this.reasons.delete(name);
    else this.reasons.set(name, reason);
  }

  /** The text set by {@link setReason} for `name`, if any. */
  reason(name: HealthComponent): string | undefined {
    return this.reasons.get(name);
  }

  /** Whether every registered component is healthy. */
  isHealthy(): boolean {
    return this.healthy;
  }

  /** The state of each registered component. */
  components(): Record<string, boolean> {
    return Object.fromEntries(this.states);
  }

  /** Whether `name` is a registered component. */
  has(name: HealthComponent): boolean {
    return this.states.has(name);
  }

  /** Calls `listener` with the overall health whenever it changes; returns an unsubscribe. */
  onChange(listener: HealthListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  private set(name: HealthComponent, value: boolean): void {
    if (!this.states.has(name) || this.states.get(name) === value) return;
    this.states.set(name, value);
    const healthy = this.compute();
    if (healthy === this.healthy) return;
    this.healthy = healthy;
    for (const listener of this.listeners) listener(healthy);
  }

  private compute(): boolean {
    for (const [name, v] of this.states)
      if (!v && !this.tolerated.has(name)) return false;
    return true;
  }
}
