// A consumer's progress against the stream's head, as every display shows it (CLI status, the main job's
// progress line, the workflow's Current Details).

/**
 * The head is learnt at a session's hello and a live stream commits past it, so the head shown is never behind
 * the committed position (and the lag never negative). Each is null when what it needs is unknown.
 */
export function headAndLagAt(
  position: number | null,
  seenHead: number | null,
): { head: number | null; lag: number | null } {
  const head = seenHead !== null && position !== null ? Math.max(seenHead, position) : seenHead;
  return { head, lag: head !== null && position !== null ? head - position : null };
}
