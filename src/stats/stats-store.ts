/** A monotonically increasing count. `add` is the only call on the hot path. */
export interface Counter {
  /** Full statistic name, e.g. `ratelimit.service.config_load_success`. */
  readonly name: string;
  /** Adds `n` (≥ 0) to the counter. */
  add(n: number): void;
  /** Total since the process started. */
  value(): number;
}

/** A value that is set, not accumulated. */
export interface Gauge {
  /** Full statistic name, e.g. `ratelimit.localcache.entryCount`. */
  readonly name: string;
  /** Replaces the value. */
  set(value: number): void;
  /** The last value set (0 before the first). */
  value(): number;
}

/** Records durations in milliseconds. */
export interface Timer {
  /** Full statistic name, e.g. `ratelimit_server.ShouldRateLimit.response_time`. */
  readonly name: string;
  /** Records one duration, in milliseconds. */
  recordMs(durationMs: number): void;
  /** Count of recorded durations and their sum in milliseconds. */
  value(): { count: number; sumMs: number };
}

/**
 * Receives every duration a timer records, at record time (on the request path, so it must be
 * cheap and must not throw): a sink's histogram, or a per-flush sample buffer.
 */
export type TimerListener = (durationMs: number) => void;

/**
 * Chooses the listener of one timer, called once per timer (for existing timers when
 * installed, then for each new timer as it is created); `undefined` attaches none.
 */
export type TimerListenerFactory = (timer: Timer) => TimerListener | undefined;

class CounterHandle implements Counter {
  readonly name: string;
  private total = 0;
  constructor(name: string) {
    this.name = name;
  }
  add(n: number): void {
    this.total += n;
  }
  value(): number {
    return this.total;
  }
}

class GaugeHandle implements Gauge {
  readonly name: string;
  private current = 0;
  constructor(name: string) {
    this.name = name;
  }
  set(value: number): void {
    this.current = value;
  }
  value(): number {
    return this.current;
  }
}

class TimerHandle implements Timer {
  readonly name: string;
  private count = 0;
  private sumMs = 0;
  /** Set by {@link StatsStore.setTimerListenerFactory}; one property check when unset. */
  listener: TimerListener | undefined = undefined;
  constructor(name: string) {
    this.name = name;
  }
  recordMs(durationMs: number): void {
    this.count++;
    this.sumMs += durationMs;
    const listener = this.listener;
    if (listener !== undefined) listener(durationMs);
  }
  value(): { count: number; sumMs: number } {
    return { count: this.count, sumMs: this.sumMs };
  }
}

/**
 * In-process registry of every statistic by full name. Handles are created once and reused;
 * sinks (push, pull, standard output) read from here. The values are kept even when
 * statistics are disabled (`DISABLE_STATS`), so the debug `/stats` page always has them.
 */
export class StatsStore {
  private readonly counters = new Map<string, Counter>();
  private readonly gauges = new Map<string, Gauge>();
  private readonly timers = new Map<string, TimerHandle>();
  private timerListenerFactory: TimerListenerFactory | undefined;

  /** Returns the counter named `name`, creating it on first use. */
  counter(name: string): Counter {
    let c = this.counters.get(name);
    if (c === undefined) {
      c = new CounterHandle(name);
      this.counters.set(name, c);
    }
    return c;
  }

  /** Returns the gauge named `name`, creating it on first use. */
  gauge(name: string): Gauge {
    let g = this.gauges.get(name);
    if (g === undefined) {
      g = new GaugeHandle(name);
      this.gauges.set(name, g);
    }
    return g;
  }

  /** Returns the timer named `name`, creating it on first use. */
  timer(name: string): Timer {
    let t = this.timers.get(name);
    if (t === undefined) {
      t = new TimerHandle(name);
      t.listener = this.timerListenerFactory?.(t);
      this.timers.set(name, t);
    }
    return t;
  }

  /**
   * Installs (or, with `undefined`, removes) the listener factory of every timer, existing and
   * future. One running sink owns it.
   */
  setTimerListenerFactory(factory: TimerListenerFactory | undefined): void {
    this.timerListenerFactory = factory;
    for (const t of this.timers.values()) t.listener = factory?.(t);
  }

  /** Number of counters, gauges and timers held. */
  get size(): number {
    return this.counters.size + this.gauges.size + this.timers.size;
  }

  /** Every counter, gauge and timer, sorted by name. */
  snapshot(): {
    counters: Counter[];
    gauges: Gauge[];
    timers: Timer[];
  } {
    const byName = (a: { name: string }, b: { name: string }): number =>
      a.name < b.name ? -1 : a.name > b.name ? 1 : 0;
    return {
      counters: [...this.counters.values()].sort(byName),
      gauges: [...this.gauges.values()].sort(byName),
      timers: [...this.timers.values()].sort(byName),
    };
  }
}
