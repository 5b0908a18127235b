import type { TLSSocket } from "node:tls";

// Apart from tls-credentials.ts so that the listeners can check a client's name without
// loading node:tls at start (it is loaded only when TLS is configured).

/** Whether the peer certificate carries `DNS:<name>` among its subject alternative names. */
export function hasDnsSan(socket: TLSSocket, name: string): boolean {
  const san = socket.getPeerCertificate().subjectaltname;
  if (san === undefined) return false;
  return san.split(",").some((part) => part.trim() === `DNS:${name}`);
}
