import { readFileSync } from "node:fs";
import { dirname } from "node:path";
import { createSecureContext, type SecureContextOptions } from "node:tls";
import { watch, type FSWatcher } from "chokidar";
import type { Logger } from "pino";

/** Options of {@link loadTlsCredentials}. */
export interface TlsCredentialsOptions {
  /** Server certificate chain file, PEM (`GRPC_SERVER_TLS_CERT`). */
  readonly certFile: string;
  /** Server private key file, PEM (`GRPC_SERVER_TLS_KEY`). */
  readonly keyFile: string;
  /**
   * CA file, PEM, that client certificates must chain to (`GRPC_CLIENT_TLS_CACERT`); set
   * means mutual TLS. Unlike the reference, system roots are not trusted for clients.
   * @defaultValue none
   */
  readonly clientCaFile?: string;
  readonly logger: Logger;
  /** Wait after the last file change before reloading, in ms. @defaultValue 200 */
  readonly debounceMs?: number;
}

/** Server TLS material that follows its files. */
export interface TlsCredentials {
  /** The current certificate, key and client CA, as `tls` options. */
  current(): SecureContextOptions;
  /**
   * Calls `listener` with new options after the files changed and the new pair proved
   * valid; a bad pair is logged and ignored (the old one keeps serving).
   */
  onReload(listener: (options: SecureContextOptions) => void): void;
  /** Stops watching; idempotent. */
  close(): Promise<void>;
}

function readCredentials(options: TlsCredentialsOptions): SecureContextOptions {
  const loaded: SecureContextOptions = {
    cert: readFileSync(options.certFile),
    key: readFileSync(options.keyFile),
    ...(options.clientCaFile !== undefined
      ? { ca: readFileSync(options.clientCaFile) }
      : {}),
  };
  // Throws when the key does not match the certificate or a file is not valid PEM.
  createSecureContext(loaded);
  return loaded;
}

/**
 * Loads the gRPC server's TLS files and watches their directories (so Kubernetes secret
 * symlink swaps and `mv` replacements count), reloading after changes settle. Same role as
 * upstream `provider/cert_provider.go`.
 *
 * @throws the read or parse error when the initial files are missing or do not form a pair
 */
export function loadTlsCredentials(
  options: TlsCredentialsOptions,
): TlsCredentials {
  const { logger } = options;
  let current = readCredentials(options);
  const listeners: ((o: SecureContextOptions) => void)[] = [];
  let timer: NodeJS.Timeout | undefined;
  const files = [
    options.certFile,
    options.keyFile,
    ...(options.clientCaFile !== undefined ? [options.clientCaFile] : []),
  ];
  const reload = (): void => {
    try {
      current = readCredentials(options);
    } catch (err) {
      logger.error(
        { err, certFile: options.certFile, keyFile: options.keyFile },
        "failed to load the new TLS key pair; keeping the previous one",
      );
      return;
    }
    logger.info(
      { certFile: options.certFile, keyFile: options.keyFile },
      "reloaded TLS certificate",
    );
    for (const listener of listeners) listener(current);
  };
  const watcher: FSWatcher = watch([...new Set(files.map((f) => dirname(f)))], {
    ignoreInitial: true,
    depth: 0,
  });
  watcher.on("all", () => {
    clearTimeout(timer);
    timer = setTimeout(reload, options.debounceMs ?? 200);
    timer.unref();
  });
  watcher.on("error", (err: unknown) => {
    logger.warn({ err }, "TLS file watch failed");
  });
  let closing: Promise<void> | undefined;
  return {
    current: () => current,
    onReload: (listener) => {
      listeners.push(listener);
    },
    close() {
      clearTimeout(timer);
      closing ??= watcher.close();
      return closing;
    },
  };
}
