import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Paths of a PEM certificate and its key. */
export interface CertFiles {
  readonly cert: string;
  readonly key: string;
}

/** What a leaf certificate may be used for (its extended key usage). */
export type CertUsage = "server" | "client" | "both";

const extendedKeyUsage: Readonly<Record<CertUsage, string>> = {
  server: "serverAuth",
  client: "clientAuth",
  both: "serverAuth,clientAuth",
};

// EC P-256 keys: much faster to generate than RSA, and every peer in the tests accepts them.
const ecKey = [
  "-newkey",
  "ec",
  "-pkeyopt",
  "ec_paramgen_curve:prime256v1",
  "-nodes",
];

/**
 * A throwaway PKI made with Debian's openssl: CAs, and leaf certificates with the SANs and key
 * usages a test needs. The one certificate generator of the test helpers.
 */
export class TestPki {
  /** Directory holding `<name>.crt` / `<name>.key` for every certificate made. */
  readonly dir: string;
  private serial = 1;

  /** @param dir - where to write the files @defaultValue a new temp directory */
  constructor(dir?: string) {
    this.dir = dir ?? mkdtempSync(join(tmpdir(), "rls-pki-"));
  }

  /** Creates a self-signed CA named `name`, valid for two days. */
  ca(name: string): CertFiles {
    const cert = join(this.dir, `${name}.crt`);
    const key = join(this.dir, `${name}.key`);
    execFileSync(
      "openssl",
      [
        "req",
        "-x509",
        ...ecKey,
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
   * `DNS:localhost,IP:127.0.0.1` (none when undefined) and the given usage.
   */
  leaf(
    name: string,
    ca: CertFiles,
    san?: string,
    usage: CertUsage = "both",
  ): CertFiles {
    const cert = join(this.dir, `${name}.crt`);
    const key = join(this.dir, `${name}.key`);
    const csr = join(this.dir, `${name}.csr`);
    const ext = join(this.dir, `${name}.ext`);
    writeFileSync(
      ext,
      (san !== undefined ? `subjectAltName=${san}\n` : "") +
        `extendedKeyUsage=${extendedKeyUsage[usage]}\nbasicConstraints=CA:FALSE\n`,
    );
    execFileSync(
      "openssl",
      ["req", ...ecKey, "-subj", `/CN=${name}`, "-keyout", key, "-out", csr],
      {
        stdio: "ignore",
      },
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

  /** Deletes the directory and everything in it. */
  remove(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}
