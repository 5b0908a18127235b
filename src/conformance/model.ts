// The suite's vocabulary: requests and answers as the wire carries them (normalised so that the
// gRPC and the /json transports compare alike), what a step expects, scenarios and sections.
// Nothing here knows a server's implementation: only RLS v3 messages and config files.

/** A decision code as the RLS v3 enum names it. */
export type CodeName = "UNKNOWN" | "OK" | "OVER_LIMIT";

/** A rate-limit unit as the RLS v3 response enum names it. */
export type UnitName =
  "UNKNOWN" | "SECOND" | "MINUTE" | "HOUR" | "DAY" | "WEEK" | "MONTH" | "YEAR";

/** One descriptor of a request: entries in order, and the optional per-descriptor fields. */
export interface DescriptorRequest {
  readonly entries: readonly (readonly [key: string, value: string])[];
  /** `hits_addend` of the descriptor (a UInt64Value: absent and 0 differ). */
  readonly hitsAddend?: number;
  /** `is_negative_hits`: give the hits back (an extension, Envoy ≥ 1.38). */
  readonly refund?: boolean;
}

/** One ShouldRateLimit call. */
export interface CallRequest {
  readonly domain: string;
  readonly descriptors: readonly DescriptorRequest[];
  /** Request-level `hits_addend` (0 or absent means 1). */
  readonly hitsAddend?: number;
}

/** One `statuses[]` entry, normalised. */
export interface StatusView {
  readonly code: CodeName;
  /** `current_limit`, or null when the answer has none. */
  readonly currentLimit: {
    readonly requestsPerUnit: number;
    readonly unit: UnitName;
  } | null;
  readonly limitRemaining: number;
  /** `duration_until_reset` in whole seconds, or null when absent. */
  readonly durationUntilReset: number | null;
}

/** A decision, normalised from either transport. */
export interface AnswerView {
  readonly overallCode: CodeName;
  readonly statuses: readonly StatusView[];
  /** `response_headers_to_add`, in order. */
  readonly headers: readonly { readonly key: string; readonly value: string }[];
  /** HTTP status on `/json`; undefined on gRPC. */
  readonly httpStatus?: number;
}

/** What a call produced: an answer or an error (its code and message as text). */
export type CallOutcome =
  | { readonly kind: "answer"; readonly answer: AnswerView }
  | {
      readonly kind: "error";
      readonly error: string;
      readonly httpStatus?: number;
    };

/** The transport of a step. */
export type Via = "grpc" | "json";

/** What one status must show; an absent field is not checked. */
export interface StatusExpectation {
  readonly code?: CodeName;
  /** Expected `current_limit`; null: must be absent. */
  readonly limit?: {
    readonly requestsPerUnit: number;
    readonly unit: UnitName;
  } | null;
  readonly remaining?: number;
  /**
   * `duration_until_reset`: a unit checks the epoch-aligned window maths of that unit against
   * the suite's clock (±1 s); a range checks bounds in seconds; null: must be absent.
   */
  readonly reset?:
    UnitName | { readonly min: number; readonly max: number } | null;
}

/** What one call must answer; an absent field is not checked. */
export interface Expectation {
  readonly overall?: CodeName;
  /** One per request descriptor; undefined entries are not checked. */
  readonly statuses?: readonly (StatusExpectation | undefined)[];
  /** `/json` only: the HTTP status. */
  readonly httpStatus?: number;
  /** Headers that must be present with these values ("reset:<UNIT>" checks the window). */
  readonly headers?: Readonly<Record<string, string>>;
  /** True: headers must be absent altogether. */
  readonly noHeaders?: boolean;
  /** True: the call must fail (any error code); the spec names no code. */
  readonly error?: boolean;
}

/** One request and what it must answer. */
export interface Step {
  /** Descriptors; the scenario's own domain unless `domain` is set. */
  readonly descriptors: readonly DescriptorRequest[];
  readonly hitsAddend?: number;
  /** A domain other than the scenario's own (e.g. one that exists nowhere). */
  readonly domain?: string;
  readonly via?: Via;
  readonly expect: Expectation;
}

/** A mismatch between what a scenario expected and what the server did. */
export class Mismatch extends Error {
  override readonly name = "Mismatch";
  constructor(
    readonly request: unknown,
    readonly expected: unknown,
    readonly actual: unknown,
    message = "unexpected answer",
  ) {
    super(message);
  }
}

/** A scenario's verdict that the server lacks a feature beyond the spec. */
export class NotSupported extends Error {
  override readonly name = "NotSupported";
}

/** What a scenario written as code may do. */
export interface ScenarioContext {
  /** The scenario's own domain (also the domain of its config file). */
  readonly domain: string;
  /** A seeded random number in [0, 1). */
  random(): number;
  /** A fresh value unique in this run (for key-only rules). */
  unique(prefix?: string): string;
  /** Sends one call and returns what it produced. */
  call(request: CallRequest, via?: Via): Promise<CallOutcome>;
  /** Runs a step: sends it, throws a `Mismatch` when the answer differs. */
  step(step: Step): Promise<AnswerView | undefined>;
  /** GET or POST on the HTTP port; undefined when the target has no HTTP port. */
  http(
    method: string,
    path: string,
    body?: string,
  ): Promise<{ status: number; body: string; contentType: string } | undefined>;
  /** Config files (only in sections marked `reloads`): write, remove, then wait for the reload. */
  readonly files: ConfigFiles;
  /**
   * Sends one call to replica `index` (modulo the replicas there are); a section without
   * `replicas` has one.
   */
  callReplica(index: number, request: CallRequest): Promise<CallOutcome>;
  /** Records a measurement for the report (printed under "Measurements", not in `--json`). */
  note(text: string): void;
  /**
   * The session's own store (sections with `ownStore`, launch mode, kv or mc): freeze stops it
   * answering (SIGSTOP), thaw resumes it. Undefined elsewhere.
   */
  readonly store: { freeze(): void; thaw(): void } | undefined;
  /** The launched server's counter store; undefined in running mode (unknown). */
  readonly backend: "memory" | "kv" | "mc" | undefined;
}

/** The config directory, for sections that reload. */
export interface ConfigFiles {
  /** Writes `<name>.yaml` (a YAML text) without waiting. */
  write(name: string, yamlText: string): Promise<void>;
  remove(name: string): Promise<void>;
  /** Waits until the last writes were loaded (a probe file answers); false after the timeout. */
  settle(timeoutMs?: number): Promise<boolean>;
}

/** A config rule tree as YAML-shaped data (`descriptors:` of a file). */
export type DescriptorConfig = Readonly<Record<string, unknown>>;

/** One scenario: its own domain and config, steps or code. */
export interface Scenario {
  /** Short id, unique within its section (used in file and domain names). */
  readonly id: string;
  readonly title: string;
  /** The spec section it checks, e.g. "Matching rules 3". */
  readonly spec: string;
  /** The descriptors of its config file (its domain is filled in); none: no file. */
  readonly config?: readonly DescriptorConfig[];
  /** Top-level fields besides `domain` and `descriptors` (extensions such as `charge`). */
  readonly fileExtra?: Readonly<Record<string, unknown>>;
  readonly steps?: readonly Step[];
  readonly run?: (ctx: ScenarioContext) => Promise<void>;
}

/** Server settings a section needs beyond the defaults, by meaning (mapped per flavour). */
export interface ProfileSettings {
  readonly globalShadowMode?: boolean;
  readonly responseHeaders?: boolean;
  readonly healthNeedsConfig?: boolean;
}

/** A group of scenarios reported as one table row. */
export interface Section {
  readonly name: string;
  /** A section beyond the spec: a server without the feature is "not supported". */
  readonly beyondSpec?: boolean;
  /** Settings: the section then runs on a server of its own (launch mode only). */
  readonly settings?: ProfileSettings;
  /** The section writes config files while it runs: it runs alone, after the others. */
  readonly reloads?: boolean;
  /** Launch mode only: starts its own server with no config file (and its settings). */
  readonly ownServer?: boolean;
  /** Launch mode with a shared store only: this many servers on one store and one config. */
  readonly replicas?: number;
  /**
   * Launch mode, kv or mc only: a store of its own, which its scenarios may freeze (they run
   * one at a time, so that a freeze is seen only by the scenario that made it).
   */
  readonly ownStore?: boolean;
  readonly scenarios: readonly Scenario[];
}

/** The result of one scenario. */
export type ScenarioResult =
  | { readonly status: "passed"; readonly notes?: readonly string[] }
  | { readonly status: "notSupported"; readonly reason: string }
  | {
      readonly status: "failed";
      readonly request: unknown;
      readonly expected: unknown;
      readonly actual: unknown;
      readonly message: string;
      readonly notes?: readonly string[];
    };

/** One failure as `--json` writes it. */
export interface FailureReport {
  readonly scenario: string;
  readonly title: string;
  readonly spec: string;
  readonly message: string;
  readonly request: unknown;
  readonly expected: unknown;
  readonly actual: unknown;
}

/** One section's totals as `--json` writes it. */
export interface SectionReport {
  readonly name: string;
  readonly beyondSpec: boolean;
  readonly passed: number;
  readonly failed: number;
  readonly notSupported: number;
  readonly failures: readonly FailureReport[];
  /** Why scenarios were not supported (one line per distinct reason). */
  readonly notSupportedReasons: readonly string[];
  /** Measurements the scenarios recorded, in scenario order. */
  readonly notes: readonly string[];
}

/** The whole run as `--json` writes it (the shape, plus per-section detail). */
export interface RunReport {
  readonly passed: number;
  readonly failed: number;
  readonly notSupported: number;
  readonly sections: readonly SectionReport[];
}
