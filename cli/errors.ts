// Operational failures of a CLI command (exit 1). Usage errors are CliUsageError (exit 2) in args.ts.
export type CliErrorCode =
  | 'unknown_consumer'
  | 'not_running'
  | 'not_paused'
  | 'already_running'
  | 'decision_rejected'
  | 'no_answer'
  | 'temporal_unavailable'
  | 'database_unavailable'
  | 'config_invalid'
  | 'schedule_exists'
  | 'unknown_schedule'
  | 'backfill_failed'
  | 'maintenance_failed'
  | 'nothing_matched';

/**
 * A CliError is one by this mark, not by its class: the bundled CLI (dist/cli/main.js) starts `run` and `backfill`
 * from their unbundled modules, whose CliError is another copy of this class, and the exit code depends on telling
 * their errors apart.
 */
const CLI_ERROR = Symbol.for('whalehunt-consumer.CliError');

export class CliError extends Error {
  override readonly name = 'CliError';
  readonly [CLI_ERROR] = true;

  static override [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === 'object' && value !== null && (value as { [CLI_ERROR]?: unknown })[CLI_ERROR] === true;
  }

  constructor(
    readonly code: CliErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
