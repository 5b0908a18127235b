/** Names of the health components (spec "Health" table). */
export type HealthComponent = "backend" | "config" | "sigterm";

/** Receives the overall health after every change of it. */
export type HealthListener = (healthy: boolean) => void;

/**
 * Tracks named health components; overall healthy only when every registered component is.
 * Backends, providers and the service write it; servers read it.
 */
export class HealthChecker {
  private readonly states = new Map<HealthComponent, boolean>();
  private readonly listeners = new Set<HealthListener>();
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
    for (const v of this.states.values()) if (!v) return false;
    return true;
  }
}
