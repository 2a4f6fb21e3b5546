// Shared by the CLI's long-running commands (the main job, backfill).

/** A second signal this soon after the first is the same Ctrl-C delivered twice, not a request to force. */
export const DUPLICATE_SIGNAL_MS = 1_000;
