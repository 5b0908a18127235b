/**
 * Window arithmetic, aligned to the Unix epoch (UTC) as upstream `utilities.go` does: a window
 * of `windowSeconds` starts at every multiple of it since the epoch. The reference's one-unit
 * windows pass the unit's length; `unit_multiplier: N` windows pass N units. All values are
 * whole seconds.
 */

/** Returns the start of the window containing `nowSeconds`: `floor(now / window) * window`. */
export function windowStartSeconds(
  nowSeconds: number,
  windowSeconds: number,
): number {
  return nowSeconds - (nowSeconds % windowSeconds);
}

/**
 * Returns the seconds until the current window ends: `window - (now mod window)`, in
 * [1, window] (never 0), as upstream `CalculateReset`.
 */
export function secondsUntilReset(
  nowSeconds: number,
  windowSeconds: number,
): number {
  return windowSeconds - (nowSeconds % windowSeconds);
}

/**
 * The sliding-window counter's share of the previous window (the approximation described
 * publicly by Cloudflare): with `e = now mod W` seconds elapsed in the current window, the
 * previous window's count weighs `(W − e) / W`. Returns `ceil(previous × (W − e) / W)`, so that
 * `weighted + current ≤ limit` holds exactly when the real-valued weighted count is within
 * the limit (current and limit being integers).
 *
 * @param previous - the previous window's counter (≥ 0)
 */
export function previousWindowWeight(
  previous: number,
  nowSeconds: number,
  windowSeconds: number,
): number {
  if (previous === 0) return 0;
  const remaining = windowSeconds - (nowSeconds % windowSeconds);
  return Math.ceil((previous * remaining) / windowSeconds);
}

/**
 * Seconds until the sliding-window weighted count `ceil(previous × (W − e)/W) + current` falls
 * by at least one, counted from `nowSeconds`, ≥ 1:
 * - while the previous window still weighs c = ceil(previous × (W − e₀)/W) ≥ 1: the first
 *   second e with previous × (W − e) ≤ (c − 1) × W, i.e. e = ceil(W × (previous − c + 1) /
 *   previous), minus e₀;
 * - else, with a current count k ≥ 1: the rest of the window, then ceil(W / k) seconds into the
 *   next one (where this window becomes the previous one and starts to fade);
 * - else (nothing counted): the rest of the window.
 */
export function slidingSecondsUntilDecrease(
  previous: number,
  current: number,
  nowSeconds: number,
  windowSeconds: number,
): number {
  const elapsed = nowSeconds % windowSeconds;
  const weight = previousWindowWeight(previous, nowSeconds, windowSeconds);
  if (weight >= 1) {
    const at = Math.ceil((windowSeconds * (previous - weight + 1)) / previous);
    return Math.max(1, at - elapsed);
  }
  const rest = windowSeconds - elapsed;
  if (current >= 1) return rest + Math.ceil(windowSeconds / current);
  return rest;
}
