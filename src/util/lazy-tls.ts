import { createRequire } from "node:module";
import type * as Tls from "node:tls";

// node:tls costs ~3 MiB of RSS once loaded (its bindings and OpenSSL's pages), and the gRPC
// listener, a store connection or a certificate list needs it only when TLS is configured.
// Code that may need it takes it from here instead of a top-level import (docs/performance.md
// "What start-up loaded without using it").

let loaded: typeof Tls | undefined;

/**
 * The node:tls module, loaded on the first call (synchronously, through `require`).
 *
 * @returns the module's exports, the same object on every call
 */
export function nodeTls(): typeof Tls {
  return (loaded ??= createRequire(import.meta.url)("node:tls") as typeof Tls);
}
