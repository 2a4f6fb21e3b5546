// The core of the tests' reference folds, written once: which journal events change an execution when the
// journal is applied once, in order, by the rules of docs/protocol.md §4. Each oracle folds these further
// into the shape its test compares (executions, revisions, volumes, alerts).

/** A trade of an entity not seen yet, or a correction above the entity's applied revision; nothing else applies. */
export function appliedEvents<E extends { kind: string; entityId: string; revision: number }>(
  events: Iterable<E>,
): E[] {
  const revisions = new Map<string, number>();
  const applied: E[] = [];
  for (const event of events) {
    const saved = revisions.get(event.entityId);
    const applies =
      event.kind === 'trade'
        ? saved === undefined
        : event.kind === 'correction' && saved !== undefined && event.revision > saved;
    if (!applies) continue;
    revisions.set(event.entityId, event.revision);
    applied.push(event);
  }
  return applied;
}
