/**
 * The environment holds invalid settings. Startup stops with this error; its message lists every
 * problem at once, one per line, each naming the variable, the bad value (hidden for secrets) and
 * what was expected, so one restart is enough to fix them all.
 */
export class SettingsError extends Error {
  override readonly name = "SettingsError";
  readonly code = "RLS_SETTINGS";
  /**
   * One entry per problem, in a stable order (variable reading order, then combination checks),
   * e.g. `PORT="ten": expected an integer from 0 to 65535`.
   */
  readonly problems: readonly string[];
  constructor(problems: readonly string[], options?: ErrorOptions) {
    const count = problems.length;
    super(
      `invalid settings (${count} ${count === 1 ? "problem" : "problems"}):\n` +
        problems.map((problem) => `  ${problem}`).join("\n"),
      options,
    );
    this.problems = Object.freeze([...problems]);
  }
}
