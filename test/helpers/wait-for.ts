/**
 * Polls `check` until it returns a value other than undefined/false, or fails after
 * `timeoutMs`. For events (file watches, reloads) whose timing the test cannot control.
 */
export async function waitFor<T>(
  check: () => T | undefined | false | Promise<T | undefined | false>,
  description: string,
  timeoutMs = 10_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined && value !== false) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `timed out waiting for ${description}${last instanceof Error ? `: ${last.message}` : ""}`,
      );
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
