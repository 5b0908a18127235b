/**
 * Fixed-window arithmetic, aligned to the Unix epoch (UTC) as upstream `utilities.go` does.
 * All values are whole seconds.
 */

/** Returns the start of the window containing `nowSeconds`: `floor(now / unit) * unit`. */
export function windowStartSeconds(
  nowSeconds: number,
  unitSeconds: number,
): number {
  return nowSeconds - (nowSeconds % unitSeconds);
}

/**
 * Returns the seconds until the current window ends: `unit - (now mod unit)`, in [1, unit]
 * (never 0), as upstream `CalculateReset`.
 */
export function secondsUntilReset(
  nowSeconds: number,
  unitSeconds: number,
): number {
  return unitSeconds - (nowSeconds % unitSeconds);
}
