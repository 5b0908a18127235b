import { describe, expect, it } from "vitest";
import { certificateIdentity } from "../../../src/service/peer-identity.js";

/** A socket-shaped object as node:tls presents a client certificate. */
function tlsPeer(cert: Record<string, unknown>, authorized = true): object {
  return { encrypted: true, authorized, getPeerCertificate: () => cert };
}

describe("certificateIdentity", () => {
  it("takes the first URI SAN, before DNS names", () => {
    expect(
      certificateIdentity(
        tlsPeer({
          subject: { CN: "cli" },
          subjectaltname:
            "DNS:cli.example, URI:spiffe://td/ns/ops/sa/cli, URI:https://x",
        }),
      ),
    ).toBe("spiffe://td/ns/ops/sa/cli");
  });

  it("reads a quoted SAN value holding a comma (Node's JSON form)", () => {
    expect(
      certificateIdentity(
        tlsPeer({ subjectaltname: 'DNS:a.example, URI:"spiffe://td/a,b"' }),
      ),
    ).toBe("spiffe://td/a,b");
  });

  it("falls back to the DNS SAN, then CN, then the whole subject", () => {
    expect(
      certificateIdentity(
        tlsPeer({
          subject: { CN: "x" },
          subjectaltname: "IP Address:1.2.3.4, DNS:b.example",
        }),
      ),
    ).toBe("b.example");
    expect(certificateIdentity(tlsPeer({ subject: { CN: "svc" } }))).toBe(
      "svc",
    );
    expect(certificateIdentity(tlsPeer({ subject: { CN: ["a", "b"] } }))).toBe(
      "a",
    );
    expect(
      certificateIdentity(
        tlsPeer({ subject: { O: "Acme", OU: ["ops", "sre"] } }),
      ),
    ).toBe("O=Acme,OU=ops+sre");
  });

  it("names nobody on cleartext, without a certificate, or when it did not verify", () => {
    expect(certificateIdentity({})).toBeUndefined();
    expect(certificateIdentity({ encrypted: false })).toBeUndefined();
    expect(certificateIdentity(tlsPeer({}))).toBeUndefined();
    expect(
      certificateIdentity(tlsPeer({ subject: { CN: "x" } }, false)),
    ).toBeUndefined();
  });
});
