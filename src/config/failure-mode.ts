/**
 * What the service answers for a domain when its counter backend (kv or mc) fails or its
 * circuit breaker is open (`BACKEND_FAILURE_MODE`, per-domain YAML `failure_mode`; see
 * `docs/failure-modes.md`):
 * - `error`: the backend error, i.e. `UNAVAILABLE` / HTTP 503 (the reference's behaviour);
 * - `allow`: OK for every descriptor, nothing counted (fail open);
 * - `deny`: OVER_LIMIT for every descriptor with a limit (fail closed);
 * - `local`: decided by an in-process limiter with each limit scaled by the local share.
 */
export type FailureMode = "error" | "allow" | "deny" | "local";

/** Every {@link FailureMode}, in documentation order. */
export const failureModes: readonly FailureMode[] = Object.freeze([
  "error",
  "allow",
  "deny",
  "local",
]);

/** Whether `text` is a {@link FailureMode} (exact, lowercase). */
export function isFailureMode(text: string): text is FailureMode {
  return (failureModes as readonly string[]).includes(text);
}
