/** Where in a config source a {@link ConfigError} was found, and what would fix it. */
export interface ConfigErrorOptions extends ErrorOptions {
  /** The config's name: the runtime key or path of a file, the resource name for xDS. */
  readonly file?: string | undefined;
  /** 1-based line in `file` of the offending node, when the source is YAML text. */
  readonly line?: number | undefined;
  /**
   * Path of the offending field from the document root, e.g.
   * `descriptors[0].rate_limit.requests_per_unit` (list indexes 0-based).
   */
  readonly fieldPath?: string | undefined;
  /**
   * What would fix it, not part of the reference's text: `did you mean 'requests_per_unit'?`,
   * `valid units: SECOND, MINUTE, …`, `first defined in a.yaml:1`.
   */
  readonly hint?: string | undefined;
  /**
   * The whole located text when it cannot be built from the parts (several located problems
   * in one error, as yaml.v2's unmarshal errors). @defaultValue built by {@link ConfigError}
   */
  readonly detail?: string | undefined;
}

/**
 * A rate-limit configuration is invalid. The message is `<file or resource name>: <problem>`,
 * with the problem texts of the reference (docs/reference-parity.md#config), unchanged for
 * parity (the xDS NACK and `Error loading new configuration` carry it). The location and the
 * hint are kept apart, in {@link ConfigError.file}, {@link ConfigError.line},
 * {@link ConfigError.fieldPath} and {@link ConfigError.hint}, and joined in
 * {@link ConfigError.detail}, the text shown to people (config check, logs, `/healthcheck`,
 * `/rlconfig?format=json`; docs/configuration.md#errors). The previous config stays in force.
 */
export class ConfigError extends Error {
  override readonly name = "ConfigError";
  readonly code = "RLS_CONFIG";
  // The location lives in an ECMAScript private field behind getters, not in own properties,
  // so an error still equals one built from the same message: equality, as tests and
  // callers use it, is the reference's text.
  readonly #where: ConfigErrorOptions;

  constructor(message: string, options: ConfigErrorOptions = {}) {
    super(
      message,
      options.cause === undefined ? undefined : { cause: options.cause },
    );
    this.#where = options;
  }

  /** See {@link ConfigErrorOptions.file}; undefined when no source is known. */
  get file(): string | undefined {
    return this.#where.file;
  }

  /** See {@link ConfigErrorOptions.line}; undefined for xDS and whole-file problems. */
  get line(): number | undefined {
    return this.#where.line;
  }

  /** See {@link ConfigErrorOptions.fieldPath}; undefined for whole-file problems. */
  get fieldPath(): string | undefined {
    return this.#where.fieldPath;
  }

  /** See {@link ConfigErrorOptions.hint}. */
  get hint(): string | undefined {
    return this.#where.hint;
  }

  /**
   * The text shown to people: the message, then ` (<hint>)`, then `; line <n>, field <path>`
   * for the parts known (the line only when the message does not already name it), e.g. `a.yaml: config error, unknown key 'requets_per_unit' (did you
   * mean 'requests_per_unit'?); line 6, field descriptors[0].rate_limit.requets_per_unit`.
   * Starts with the message, so whatever matches the reference's text still matches it.
   */
  get detail(): string {
    return (
      this.#where.detail ??
      this.message +
        (this.hint === undefined ? "" : ` (${this.hint})`) +
        locationSuffix(this.message, this.line, this.fieldPath)
    );
  }

  /**
   * The problem for a reader who already sees the file and line (the reload status): the
   * message without its `<file>: ` prefix, then ` (<hint>)`, then `; field <path>`.
   */
  get problem(): string {
    const prefix = this.file === undefined ? undefined : `${this.file}: `;
    const text =
      prefix !== undefined && this.message.startsWith(prefix)
        ? this.message.slice(prefix.length)
        : this.message;
    return (
      text +
      (this.hint === undefined ? "" : ` (${this.hint})`) +
      (this.fieldPath === undefined ? "" : `; field ${this.fieldPath}`)
    );
  }
}

/** `; line <n>, field <path>`, leaving out a line the message already names (`line <n>:`). */
function locationSuffix(
  message: string,
  line: number | undefined,
  fieldPath: string | undefined,
): string {
  const parts: string[] = [];
  if (line !== undefined && !message.includes(`line ${line}:`))
    parts.push(`line ${line}`);
  if (fieldPath !== undefined) parts.push(`field ${fieldPath}`);
  return parts.length === 0 ? "" : `; ${parts.join(", ")}`;
}
