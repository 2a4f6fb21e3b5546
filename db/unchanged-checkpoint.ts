// A plan that names the saved checkpoint (an empty replay up to an unchanged cut, delivered on every session while
// a fault recurs) is committed already: writing it would only bump the version. docs/protocol.md §6 counts only a
// position that moved forward as progress; the version must not climb either. Read inside the commit's
// transaction, after the fence: the saved row is locked.
import type pg from 'pg';
import { noAlerts } from '../domain/decide.js';
import { namesSavedCheckpoint } from '../protocol/checkpoint-change.js';
import type { CheckpointPlan, CommittedState } from '../protocol/types.js';
import { NEWER_NOTICES_SQL } from './commit-sql.js';
import type { CommitResult } from './commit-types.js';

/** The committed result of a plan that changes nothing: the saved version, nothing written. */
export async function unchangedCommit(
  client: pg.PoolClient,
  plan: CheckpointPlan,
  saved: CommittedState,
): Promise<CommitResult | null> {
  if (!namesSavedCheckpoint(plan, saved) || !(await noticesAlreadySaved(client, plan))) return null;
  return {
    version: saved.version,
    position: plan.checkpoint.position,
    applied: 0,
    duplicates: 0,
    noEffect: 0,
    quarantined: 0,
    alerts: noAlerts(),
    qualityUpdated: 0,
    outboxed: 0,
  };
}

/** Every quality notice of the plan is no newer than the saved state of its scope (the write would keep none). */
async function noticesAlreadySaved(client: pg.PoolClient, plan: CheckpointPlan): Promise<boolean> {
  const notices = plan.qualityNotices;
  if (notices.length === 0) return true;
  const res = await client.query<{ newer: number }>({
    name: 'whalehunt_commit_newer_notices',
    text: NEWER_NOTICES_SQL,
    values: [plan.consumerId, notices.map((n) => n.scope), notices.map((n) => n.position)],
  });
  return res.rows[0]!.newer === 0;
}
