// The building blocks of the settings schema: what one declaration holds, and the types derived
// from a group of declarations. How to add a setting: see the header of ./index.ts.

import type { EnvReader, SettingsEnv } from "../env-reader.js";
import type { Codec } from "./codecs.js";

/** Section of the settings table, for grouping in `--help` output and docs/settings.md. */
export type SettingsGroup =
  | "listeners"
  | "logging"
  | "configuration"
  | "xds"
  | "rate limiting"
  | "rlqs"
  | "admin"
  | "kv backend"
  | "mc backend"
  | "statistics"
  | "tracing";

/** Heading of each group in docs/settings.md. */
export const settingsGroupTitles: Readonly<Record<SettingsGroup, string>> =
  Object.freeze({
    listeners: "Listeners",
    logging: "Logging",
    configuration: "Configuration source",
    xds: "Configuration from a management server (xDS)",
    "rate limiting": "Rate limiting",
    rlqs: "Rate limit quota service (RLQS)",
    admin: "Day-2 operations (admin API)",
    "kv backend": "Key-value store backend (Redis protocol)",
    "mc backend": "Memcached-protocol backend",
    statistics: "Statistics",
    tracing: "Tracing",
  });

/** What a declaration's hooks may use besides the environment. */
export interface ResolveContext {
  /** Version-4 UUID source (injected by tests). */
  readonly randomUUID: () => string;
}

/**
 * One environment variable read into one settings field. Written once, with {@link setting},
 * in the schema file of its concern; everything else (the `Settings` field type, the parse,
 * the default, the `--help` line, the docs/settings.md row, deprecation warnings) derives from it.
 */
export interface SettingDeclaration<T> {
  readonly kind: "setting";
  /** Environment variable name, upper snake case. */
  readonly env: string;
  /**
   * Text → value, with validation; throws `EnvParseError` so the problem line reads
   * `<ENV>="<text>": <reason>; expected <what>`. Also formats the default for the table.
   */
  readonly codec: Codec<T>;
  /** Value when the variable is unset (a variable set to "" is parsed, not defaulted). */
  readonly default: NoInfer<T>;
  /**
   * Unit of the value when the field name and codec do not say it (durations are always
   * milliseconds, in fields ending in `Ms`). Documentation only.
   */
  readonly unit?: string;
  /** The default as shown in `--help` and the docs when `codec.format` would mislead. */
  readonly defaultText?: string;
  /** One line ending in a period: the meaning shown by `--help` and docs/settings.md. */
  readonly meaning: string;
  /** Keep the value out of error messages (credentials). */
  readonly secret?: boolean;
  /** Final touch after parsing, e.g. "" → a generated id. */
  readonly resolve?: (value: NoInfer<T>, context: ResolveContext) => NoInfer<T>;
  /**
   * The setting is kept for compatibility and does nothing; returns true when the value is one
   * that used to matter, which logs `<ENV> is deprecated and has no effect`.
   */
  readonly deprecatedWhen?: (value: NoInfer<T>) => boolean;
  /**
   * The setting is read and checked but its feature is not built yet; a value in use logs
   * `<ENV> has no effect yet: <feature> is not implemented in this build`, and docs mark it.
   */
  readonly notImplemented?: {
    /** The missing feature, as a noun phrase ("the local over-limit cache"). */
    readonly feature: string;
    /** True when the environment asks for the feature. */
    readonly isInUse: (value: NoInfer<T>, env: SettingsEnv) => boolean;
  };
}

/** A variable documented in the table and read by a {@link CompositeDeclaration}. */
export interface DocumentedVariable {
  /** Variable name; `<M>` stands for a name chosen by the operator. */
  readonly name: string;
  /** As {@link SettingDeclaration.defaultText}. */
  readonly defaultText: string;
  /** As {@link SettingDeclaration.meaning}. */
  readonly meaning: string;
}

/**
 * A field read from a family of variables whose names depend on other values (the tagged
 * sink's mogrifiers). `read` runs after every {@link SettingDeclaration} is parsed, in schema
 * order, and reports problems on the reader.
 */
export interface CompositeDeclaration<T, Needs> {
  readonly kind: "composite";
  /** The variables, for `--help` and the docs, in table order. */
  readonly variables: readonly DocumentedVariable[];
  /** Value of the field in `settingsDefaults`. */
  readonly default: T;
  /** Reads the field; `settings` holds every parsed plain setting. */
  readonly read: (reader: EnvReader, settings: Needs) => T;
}

/** A field computed from other settings; no variable of its own, no default. */
export interface DerivedDeclaration<T, Needs> {
  readonly kind: "derived";
  readonly derive: (settings: Needs) => T;
}

/**
 * Any entry of a settings group, with its value type erased (for the loader, which walks
 * the declarations generically).
 */
export type AnyDeclaration =
  | SettingDeclaration<unknown>
  | CompositeDeclaration<unknown, unknown>
  | DerivedDeclaration<unknown, unknown>;

/** The declarations of one group, keyed by settings field name, in table order. */
export type Declarations = Readonly<
  Record<string, { readonly kind: AnyDeclaration["kind"] }>
>;

/** A group: its table section and its declarations. */
export interface SettingsGroupSchema<S extends Declarations> {
  readonly group: SettingsGroup;
  readonly declarations: S;
}

/**
 * Declares one setting; the type parameter is inferred from `codec` and checked against
 * `default` and the hooks.
 */
export function setting<T>(
  declaration: Omit<SettingDeclaration<T>, "kind">,
): SettingDeclaration<T> {
  return Object.freeze({ kind: "setting", ...declaration });
}

/** Declares a {@link CompositeDeclaration}. */
export function composite<T, Needs>(
  declaration: Omit<CompositeDeclaration<T, Needs>, "kind">,
): CompositeDeclaration<T, Needs> {
  return Object.freeze({ kind: "composite", ...declaration });
}

/** Declares a {@link DerivedDeclaration}. */
export function derived<T, Needs>(
  derive: (settings: Needs) => T,
): DerivedDeclaration<T, Needs> {
  return Object.freeze({ kind: "derived", derive });
}

/** Declares a group of settings (one schema file). */
export function settingsGroup<S extends Declarations>(
  group: SettingsGroup,
  declarations: S,
): SettingsGroupSchema<S> {
  return Object.freeze({ group, declarations: Object.freeze(declarations) });
}

/** The value type a declaration produces. */
export type ValueOf<D> =
  D extends SettingDeclaration<infer T>
    ? T
    : D extends CompositeDeclaration<infer T, never>
      ? T
      : D extends DerivedDeclaration<infer T, never>
        ? T
        : never;

/**
 * The settings fields of one group: field name → parsed type, readonly. Homomorphic, so each
 * field keeps the TSDoc written on its declaration.
 */
export type SettingsOf<G> =
  G extends SettingsGroupSchema<infer S>
    ? { readonly [K in keyof S]: ValueOf<S[K]> }
    : never;

/**
 * A check across settings (e.g. TLS on needs a certificate). Runs after every field is read;
 * reports with `reader.problem(...)`, and should skip itself unless `reader.allValid(...)` for
 * the variables it reasons about, so one bad value does not cause a second, confusing line.
 */
export type SettingsCheck<Needs> = (settings: Needs, reader: EnvReader) => void;
