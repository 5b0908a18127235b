// Password redaction for every text that leaves the kv code (log lines, error messages):
// ioredis errors can echo the failed command's arguments, which for AUTH or HELLO include the
// password, and a connection error can echo the URL.

import type { ResolvedKvInstanceOptions } from "./kv-options.js";

/** The passwords of an instance (its own and its sentinels'), the texts {@link redactSecrets} masks. */
export function kvSecrets(instance: ResolvedKvInstanceOptions): string[] {
  return [
    instance.credentials?.password,
    instance.sentinelCredentials?.password,
  ].filter((s): s is string => s !== undefined && s !== "");
}

/** Replaces every occurrence of each secret in `text` by `*****`. */
export function redactSecrets(
  text: string,
  secrets: readonly string[],
): string {
  let out = text;
  for (const secret of secrets) out = out.split(secret).join("*****");
  return out;
}

/** The message of a thrown value (its `message` when an `Error`, else its string). */
export function kvErrorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * A copy of a client error holding only its name and its redacted message (the original
 * carries the failed command's arguments). With no secret in the message the copy's message is
 * the original's, byte for byte.
 */
export function redactedError(err: unknown, secrets: readonly string[]): Error {
  const copy = new Error(redactSecrets(kvErrorMessage(err), secrets));
  if (err instanceof Error) copy.name = err.name;
  return copy;
}
