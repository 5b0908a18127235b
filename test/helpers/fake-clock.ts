import type { Clock } from "../../src/util/clock.js";

/** A clock the test moves by hand. */
export class FakeClock implements Clock {
  seconds: number;
  constructor(seconds: number) {
    this.seconds = seconds;
  }
  nowSeconds(): number {
    return this.seconds;
  }
  nowMs(): number {
    return this.seconds * 1000;
  }
}
