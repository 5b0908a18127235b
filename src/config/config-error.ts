/**
 * A rate-limit configuration is invalid. The message is `<file or resource name>: <problem>`,
 * with the problem texts of the reference (docs/reference-parity.md#config). The previous config
 * stays in force.
 */
export class ConfigError extends Error {
  override readonly name = "ConfigError";
  readonly code = "RLS_CONFIG";
}
