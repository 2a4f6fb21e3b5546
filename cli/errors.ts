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

export class CliError extends Error {
  override readonly name = 'CliError';
  constructor(
    readonly code: CliErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
