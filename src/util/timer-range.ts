/**
 * The longest delay a Node timer keeps, in milliseconds (2^31 − 1, about 24.8 days). Node
 * turns a longer one into 1 ms (with a `TimeoutOverflowWarning`), so a deadline further away
 * than this must arm no timer at all: it is, for a rate-limit call, no deadline.
 */
export const maxTimerDelayMs = 2_147_483_647;
