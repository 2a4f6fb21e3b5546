// SIGINT/SIGTERM for the long-running processes (the worker, the main job, backfill): the first asks for a
// graceful stop, a later one for an immediate exit.

/** A second signal this soon after the first is the same Ctrl-C delivered twice, not a request to force. */
export const DUPLICATE_SIGNAL_MS = 1_000;

export interface ShutdownSignalHandlers {
  /** The first signal: stop gracefully. */
  graceful(signal: NodeJS.Signals): void;
  /** A signal past the duplicate window after the first: the operator insists; exit now. */
  forced(signal: NodeJS.Signals): void;
}

/** Listens for SIGINT and SIGTERM until the returned `off()` is called. */
export function onShutdownSignal(handlers: ShutdownSignalHandlers): () => void {
  let firstAt: number | null = null;
  const listener = (signal: NodeJS.Signals): void => {
    if (firstAt === null) {
      firstAt = Date.now();
      handlers.graceful(signal);
      return;
    }
    // One Ctrl-C can arrive twice (the terminal signals the process group, and tsx relays it again).
    if (Date.now() - firstAt < DUPLICATE_SIGNAL_MS) return;
    handlers.forced(signal);
  };
  process.on('SIGINT', listener);
  process.on('SIGTERM', listener);
  return () => {
    process.off('SIGINT', listener);
    process.off('SIGTERM', listener);
  };
}
