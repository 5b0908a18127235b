// The caller's identity from its TLS client certificate, for records of who did what (the
// override audit log). The listeners compute it once per connection and hand it to handlers
// as a Connect context value; handlers read it with `context.values.get(peerIdentityKey)`.

import { createContextKey } from "@connectrpc/connect";
import type { TLSSocket } from "node:tls";

/**
 * The verified identity of the TLS client certificate of the connection a call came on
 * (see {@link certificateIdentity}); `undefined` on cleartext, without a client certificate,
 * or with one that did not verify.
 */
export const peerIdentityKey = createContextKey<string | undefined>(undefined, {
  description: "the caller's TLS client certificate identity",
});

/** The subject alternative names of a certificate, as `type:value` pairs in order. */
function subjectAltNames(text: string): [string, string][] {
  // Node's format: `DNS:a.example, URI:spiffe://td/ns/x, IP Address:127.0.0.1`; since
  // Node 17.3.1 a value holding a comma or quote is a JSON string (`URI:"a,b"`).
  const out: [string, string][] = [];
  let i = 0;
  while (i < text.length) {
    const colon = text.indexOf(":", i);
    if (colon < 0) break;
    const type = text.slice(i, colon).trim();
    let value: string;
    let next: number;
    if (text.charCodeAt(colon + 1) === 0x22 /* " */) {
      let end = colon + 2;
      while (end < text.length && text.charCodeAt(end) !== 0x22) {
        end += text.charCodeAt(end) === 0x5c /* \ */ ? 2 : 1;
      }
      try {
        value = JSON.parse(text.slice(colon + 1, end + 1)) as string;
      } catch {
        value = text.slice(colon + 2, end);
      }
      next = text.indexOf(",", end + 1);
    } else {
      next = text.indexOf(",", colon + 1);
      value = text.slice(colon + 1, next < 0 ? text.length : next);
    }
    out.push([type, value.trim()]);
    if (next < 0) break;
    i = next + 1;
  }
  return out;
}

/**
 * The identity a verified TLS client certificate names: its first URI subject alternative
 * name (a SPIFFE ID such as `spiffe://example.org/ns/ops/sa/cli`), else its first DNS name,
 * else its subject common name, else its subject as one line. `undefined` when the socket is
 * not TLS, the client sent no certificate, or it did not verify against the client CA
 * (`GRPC_CLIENT_TLS_CACERT`).
 *
 * @param socket - the connection's socket (cleartext sockets answer `undefined`)
 */
export function certificateIdentity(socket: object): string | undefined {
  const tls = socket as Partial<TLSSocket>;
  if (tls.encrypted !== true || tls.authorized !== true) return undefined;
  const cert = tls.getPeerCertificate?.();
  if (cert === undefined || Object.keys(cert).length === 0) return undefined;
  const names = subjectAltNames(cert.subjectaltname ?? "");
  const uri = names.find(([type]) => type === "URI");
  if (uri !== undefined && uri[1] !== "") return uri[1];
  const dns = names.find(([type]) => type === "DNS");
  if (dns !== undefined && dns[1] !== "") return dns[1];
  const subject = cert.subject as Record<string, string | string[]> | undefined;
  const cn = subject?.["CN"];
  if (typeof cn === "string" && cn !== "") return cn;
  if (Array.isArray(cn) && cn[0] !== undefined) return cn[0];
  if (subject === undefined) return undefined;
  const line = Object.entries(subject)
    .map(([k, v]) => `${k}=${Array.isArray(v) ? v.join("+") : v}`)
    .join(",");
  return line === "" ? undefined : line;
}
