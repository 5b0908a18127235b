import { certificateIdentity } from "../service/peer-identity.js";

/** Identity per connection socket: a client certificate does not change on a connection. */
const identities = new WeakMap<object, string | null>();

/**
 * The verified client-certificate identity of a connection (`certificateIdentity`), computed
 * once per socket.
 *
 * @param socket - the connection's socket (`TLSSocket` or a cleartext one)
 */
export function peerIdentityOf(socket: object): string | undefined {
  let identity = identities.get(socket);
  if (identity === undefined) {
    identity = certificateIdentity(socket) ?? null;
    identities.set(socket, identity);
  }
  return identity ?? undefined;
}
