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
  readonly name: string;
  set(value: number): void;
  value(): number;
}

/** Records durations in milliseconds. */
export interface Timer {
  readonly name: string;
  /** Records one duration, in milliseconds. */
  recordMs(durationMs: number): void;
  /** Count of recorded durations and their sum in milliseconds. */
  value(): { count: number; sumMs: number };
}

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
  constructor(name: string) {
    this.name = name;
  }
  recordMs(durationMs: number): void {
    this.count++;
    this.sumMs += durationMs;
  }
  value(): { count: number; sumMs: number } {
    return { count: this.count, sumMs: this.sumMs };
  }
}

/**
 * In-process registry of every statistic by full name. Handles are created once and reused;
 * sinks (push, pull) read from here.
 */
export class StatsStore {
  private readonly counters = new Map<string, Counter>();
  private readonly gauges = new Map<string, Gauge>();
  private readonly timers = new Map<string, Timer>();

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
      this.timers.set(name, t);
    }
    return t;
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
