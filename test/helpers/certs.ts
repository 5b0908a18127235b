import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Paths of a PEM certificate and its key. */
export interface CertFiles {
  readonly cert: string;
  readonly key: string;
}

/**
 * A throwaway PKI made with Debian's openssl in a temp directory: CAs, and leaf certificates
 * with the SANs a test needs.
 */
export class TestPki {
  readonly dir = mkdtempSync(join(tmpdir(), "rls-pki-"));
  private serial = 1;

  /** Creates a self-signed CA named `name`. */
  ca(name: string): CertFiles {
    const cert = join(this.dir, `${name}.crt`);
    const key = join(this.dir, `${name}.key`);
    execFileSync(
      "openssl",
      [
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        `/CN=${name}`,
        "-keyout",
        key,
        "-out",
        cert,
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
      ],
      { stdio: "ignore" },
    );
    return { cert, key };
  }

  /**
   * Creates a leaf certificate `name` signed by `ca`, with subject alternative names such as
   * `DNS:localhost,IP:127.0.0.1`, for server and client authentication.
   */
  leaf(name: string, ca: CertFiles, san: string): CertFiles {
    const cert = join(this.dir, `${name}.crt`);
    const key = join(this.dir, `${name}.key`);
    const csr = join(this.dir, `${name}.csr`);
    const ext = join(this.dir, `${name}.ext`);
    writeFileSync(
      ext,
      `subjectAltName=${san}\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n`,
    );
    execFileSync(
      "openssl",
      [
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        `/CN=${name}`,
        "-keyout",
        key,
        "-out",
        csr,
      ],
      { stdio: "ignore" },
    );
    execFileSync(
      "openssl",
      [
        "x509",
        "-req",
        "-in",
        csr,
        "-CA",
        ca.cert,
        "-CAkey",
        ca.key,
        "-set_serial",
        String(this.serial++),
        "-days",
        "2",
        "-extfile",
        ext,
        "-out",
        cert,
      ],
      { stdio: "ignore" },
    );
    return { cert, key };
  }
}
