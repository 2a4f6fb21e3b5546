// The operator commands (everything but `run` and `sim`). Decisions go through workflow updates, so the
// workflow validates them synchronously (wrong phase, bad input) before anything reaches its history.
import {
  ScheduleAlreadyRunning,
  ScheduleNotFoundError,
  WorkflowExecutionAlreadyStartedError,
  WorkflowUpdateFailedError,
  type ScheduleSummary,
} from '@temporalio/client';
import type pg from 'pg';
import { dropOutbox, listOutbox, retryOutbox, type OutboxState } from '../db/outbox.js';
import type { consumerWorkflow, rebindWorkflow } from '../workflows/index.js';
import {
  consumerIdSearchAttribute,
  kindSearchAttribute,
  pauseSignal,
  phaseSearchAttribute,
  rebindUpdate,
  resolveBindingUpdate,
  resolveGapUpdate,
  resolveQuarantineUpdate,
  resumeSignal,
  statusQuery,
  type ConsumerStatus,
  type ConsumerWorkflowInput,
  type RebindWorkflowInput,
} from '../workflows/definitions.js';
import type { AlertState, CliCommand } from './args.js';
import { showBackfillWorkflowStatus } from './backfill-workflow.js';
import {
  consumerReport,
  totalCounters,
  findConsumer,
  isBackfill,
  requireRunning,
  withAnswerTimeout,
  workflowStart,
  type TemporalSession,
} from './consumers.js';
import { CliError } from './errors.js';
import { alertJson, formatAlertsTable, formatStatus } from './format.js';

export interface CommandIo {
  out(text: string): void;
}

type Of<N extends CliCommand['command']> = Extract<CliCommand, { command: N }>;

export const REBIND_WORKFLOW_ID_PREFIX = 'whalehunt-rebind-run:';

export async function startConsumer(session: TemporalSession, cmd: Of<'start'>, io: CommandIo): Promise<void> {
  const input: ConsumerWorkflowInput = {
    consumerId: cmd.consumerId,
    subscriptionId: cmd.subscriptionId,
    filter: cmd.filter,
    initialStart: cmd.start,
    ...(cmd.leaseMs !== undefined ? { leaseMs: cmd.leaseMs } : {}),
  };
  const start = workflowStart(session, 'stream', cmd.consumerId);
  try {
    const handle = await session.client.workflow.start<typeof consumerWorkflow>('consumerWorkflow', {
      ...start,
      args: [input],
      // A second start of a running consumer fails; a finished one may be started again (it resumes from the database).
      workflowIdConflictPolicy: 'FAIL',
    });
    io.out(
      `started consumer ${cmd.consumerId}: workflow ${start.workflowId} run ${handle.firstExecutionRunId} (first start ${cmd.start}, filter ${JSON.stringify(cmd.filter)})`,
    );
  } catch (error) {
    if (error instanceof WorkflowExecutionAlreadyStartedError) {
      throw new CliError(
        'already_running',
        `consumer "${cmd.consumerId}" is already running (workflow ${start.workflowId}); see \`whalehunt-consumer status --consumer ${cmd.consumerId}\``,
      );
    }
    throw error;
  }
}

export async function showStatus(
  session: TemporalSession,
  pool: pg.Pool | null,
  cmd: Of<'status'>,
  io: CommandIo,
): Promise<void> {
  const workflow = await findConsumer(session, cmd.consumerId).catch(() => null);
  if (workflow && isBackfill(workflow)) {
    await showBackfillWorkflowStatus(session, pool, workflow, cmd.consumerId, cmd.json, io);
    return;
  }
  const report = await consumerReport(session, pool, cmd.consumerId);
  if (cmd.json) {
    // Mappings can be large and say nothing about progress; the count is enough here.
    const binding = report.database?.state.binding;
    const database = report.database && {
      ...report.database,
      state: {
        ...report.database.state,
        binding: binding && { ...binding, mappings: Object.keys(binding.mappings).length },
      },
    };
    io.out(JSON.stringify({ ...report, database, totals: totalCounters(report) }, null, 2));
  } else {
    io.out(formatStatus(report, Date.now()));
  }
}

/**
 * Runs a decision update; a rejection (invalid input, wrong phase) becomes decision_rejected with the workflow's
 * reason.
 */
async function decide(
  session: TemporalSession,
  consumerId: string,
  what: string,
  run: (handle: Awaited<ReturnType<typeof findConsumer>>['handle']) => Promise<ConsumerStatus>,
): Promise<ConsumerStatus> {
  const workflow = await findConsumer(session, consumerId);
  requireRunning(consumerId, workflow);
  try {
    return await withAnswerTimeout(session, what, () => run(workflow.handle), undefined, workflow.handle);
  } catch (error) {
    if (error instanceof WorkflowUpdateFailedError) {
      const reason = error.cause instanceof Error ? error.cause.message : error.message;
      throw new CliError('decision_rejected', `${what} rejected by consumer "${consumerId}": ${reason}`, {
        cause: error,
      });
    }
    throw error;
  }
}

/** A decision on a gap (reset_required) or a binding (cursor_mismatch) stop. */
export async function resolveStop(
  session: TemporalSession,
  cmd: Of<'resolve-gap'> | Of<'resolve-binding'>,
  io: CommandIo,
): Promise<void> {
  const what = cmd.command === 'resolve-gap' ? 'gap decision' : 'binding decision';
  const audit = { actor: cmd.actor, reason: cmd.reason };
  const status = await decide(session, cmd.consumerId, what, (handle) =>
    cmd.command === 'resolve-gap'
      ? handle.executeUpdate(resolveGapUpdate, { args: [{ decision: cmd.decision, ...audit }] })
      : handle.executeUpdate(resolveBindingUpdate, { args: [{ decision: cmd.decision, ...audit }] }),
  );
  io.out(`${what} ${cmd.decision} recorded for ${cmd.consumerId} by ${cmd.actor}; phase now ${status.phase}`);
}

export async function resolveQuarantine(
  session: TemporalSession,
  cmd: Of<'resolve-quarantine'>,
  io: CommandIo,
): Promise<void> {
  const status = await decide(session, cmd.consumerId, 'quarantine decision', (handle) =>
    handle.executeUpdate(resolveQuarantineUpdate, {
      args: [
        {
          decision: cmd.decision,
          actor: cmd.actor,
          reason: cmd.reason,
          ...(cmd.eventIds ? { eventIds: cmd.eventIds } : {}),
        },
      ],
    }),
  );
  const scope = cmd.eventIds ? `events ${cmd.eventIds.join(', ')}` : 'all held events';
  io.out(
    `quarantine decision ${cmd.decision} (${scope}) recorded for ${cmd.consumerId} by ${cmd.actor}; phase now ${status.phase}`,
  );
}

export async function rebind(session: TemporalSession, cmd: Of<'rebind'>, io: CommandIo): Promise<void> {
  const status = await decide(session, cmd.consumerId, 'rebind', (handle) =>
    handle.executeUpdate(rebindUpdate, { args: [{ filter: cmd.filter, requestedBy: cmd.actor }] }),
  );
  const generation = status.committed?.generation;
  io.out(
    `rebind of ${cmd.consumerId} to ${JSON.stringify(cmd.filter)} accepted` +
      (generation != null ? `: generation ${generation + 1} starts at the next checkpoint boundary` : ''),
  );
}

export async function pauseOrResume(
  session: TemporalSession,
  cmd: Of<'pause'> | Of<'resume'>,
  io: CommandIo,
): Promise<void> {
  const workflow = await findConsumer(session, cmd.consumerId);
  requireRunning(cmd.consumerId, workflow);
  if (cmd.command === 'resume') {
    // The signal cannot answer, and a consumer that is not paused ignores it: ask first.
    const status = await withAnswerTimeout(
      session,
      'status query',
      () => workflow.handle.query(statusQuery),
      undefined,
      workflow.handle,
    );
    if (status.phase !== 'paused') {
      throw new CliError(
        'not_paused',
        `consumer "${cmd.consumerId}" is not paused (phase ${status.phase}): nothing to resume` +
          (status.stop?.resolveWith ? `; it waits for: ${status.stop.resolveWith}` : ''),
      );
    }
  }
  await workflow.handle.signal(cmd.command === 'pause' ? pauseSignal : resumeSignal, {
    actor: cmd.actor,
    reason: cmd.reason,
  });
  io.out(
    cmd.command === 'pause'
      ? `pause requested for ${cmd.consumerId}: it stops at its next checkpoint boundary`
      : `resume requested for ${cmd.consumerId}`,
  );
}

export async function listConsumers(session: TemporalSession, cmd: Of<'list'>, io: CommandIo): Promise<void> {
  // Ids and phases were validated against safe alphabets, so quoting them is enough.
  const clauses = [`(WorkflowType = "consumerWorkflow" OR WorkflowType = "backfillWorkflow")`];
  if (cmd.consumerId) clauses.push(`${consumerIdSearchAttribute.name} = "${cmd.consumerId}"`);
  if (cmd.phase) clauses.push(`${phaseSearchAttribute.name} = "${cmd.phase}"`);
  const rows: {
    consumerId: string | null;
    kind: string;
    phase: string | null;
    status: string;
    workflowId: string;
    runId: string;
    startTime: string;
  }[] = [];
  for await (const execution of session.client.workflow.list({ query: clauses.join(' AND ') })) {
    rows.push({
      consumerId: execution.typedSearchAttributes.get(consumerIdSearchAttribute) ?? null,
      // Workflows started before the kind attribute existed are told apart by their type.
      kind:
        execution.typedSearchAttributes.get(kindSearchAttribute) ??
        (execution.type === 'backfillWorkflow' ? 'backfill' : 'stream'),
      phase: execution.typedSearchAttributes.get(phaseSearchAttribute) ?? null,
      status: execution.status.name,
      workflowId: execution.workflowId,
      runId: execution.runId,
      startTime: execution.startTime.toISOString(),
    });
  }
  if (cmd.json) {
    for (const row of rows) io.out(JSON.stringify(row));
    return;
  }
  if (rows.length === 0) {
    io.out('no consumers match');
    return;
  }
  const header = ['CONSUMER', 'KIND', 'PHASE', 'STATUS', 'STARTED'];
  const table = [
    header,
    ...rows.map((r) => [r.consumerId ?? r.workflowId, r.kind, r.phase ?? '-', r.status, r.startTime]),
  ];
  const widths = header.map((_, i) => Math.max(...table.map((row) => row[i]!.length)));
  for (const row of table)
    io.out(
      row
        .map((cell, i) => cell.padEnd(widths[i]!))
        .join('  ')
        .trimEnd(),
    );
}

export async function scheduleRebind(
  session: TemporalSession,
  cmd: Of<'schedule-rebind'>,
  io: CommandIo,
): Promise<void> {
  switch (cmd.action) {
    case 'create': {
      const input: RebindWorkflowInput = { consumerId: cmd.consumerId, filter: cmd.filter, requestedBy: cmd.actor };
      try {
        await session.client.schedule.create<typeof rebindWorkflow>({
          scheduleId: cmd.scheduleId,
          spec:
            'cron' in cmd.timing
              ? { cronExpressions: [cmd.timing.cron] }
              : { intervals: [{ every: cmd.timing.every as `${number}s` }] },
          action: {
            type: 'startWorkflow',
            workflowType: 'rebindWorkflow',
            workflowId: `${REBIND_WORKFLOW_ID_PREFIX}${cmd.consumerId}`,
            taskQueue: session.config.taskQueue,
            args: [input],
          },
          // A rebind still waiting for its generation is not doubled by the next tick.
          policies: { overlap: 'SKIP' },
          memo: { consumerId: cmd.consumerId },
        });
      } catch (error) {
        if (error instanceof ScheduleAlreadyRunning) {
          throw new CliError(
            'schedule_exists',
            `schedule ${cmd.scheduleId} already exists; delete it first to change it`,
          );
        }
        throw error;
      }
      const when = 'cron' in cmd.timing ? `cron "${cmd.timing.cron}" (UTC)` : `every ${cmd.timing.every}`;
      io.out(`schedule ${cmd.scheduleId} created: rebind ${cmd.consumerId} to ${JSON.stringify(cmd.filter)} ${when}`);
      return;
    }
    case 'list': {
      const rows: ScheduleSummary[] = [];
      for await (const schedule of session.client.schedule.list()) {
        if (schedule.action?.type !== 'startWorkflow' || schedule.action.workflowType !== 'rebindWorkflow') continue;
        if (cmd.consumerId && schedule.memo?.consumerId !== cmd.consumerId) continue;
        rows.push(schedule);
      }
      if (rows.length === 0 && !cmd.json) io.out('no rebind schedules');
      for (const s of rows) {
        const next = s.info.nextActionTimes[0]?.toISOString() ?? null;
        const consumerId = typeof s.memo?.consumerId === 'string' ? s.memo.consumerId : null;
        if (cmd.json)
          io.out(JSON.stringify({ scheduleId: s.scheduleId, consumerId, paused: s.state.paused, nextActionAt: next }));
        else
          io.out(
            `${s.scheduleId}  consumer ${consumerId ?? '-'}  next ${next ?? '-'}${s.state.paused ? '  (paused)' : ''}`,
          );
      }
      return;
    }
    case 'delete': {
      try {
        await session.client.schedule.getHandle(cmd.scheduleId).delete();
      } catch (error) {
        if (error instanceof ScheduleNotFoundError)
          throw new CliError('unknown_schedule', `unknown schedule "${cmd.scheduleId}"`);
        throw error;
      }
      io.out(`schedule ${cmd.scheduleId} deleted`);
      return;
    }
  }
}

// ---- whale alerts: the outbox, read and changed in the database only (no Temporal) ---------------------------

/** `sent` is stored as `done`; the other states under their own names (`pending` covers `claimed` in listOutbox). */
const OUTBOX_STATE_OF: Record<AlertState, OutboxState> = {
  pending: 'pending',
  dead: 'dead',
  sent: 'done',
  suppressed: 'suppressed',
  dropped: 'dropped',
};

/** Runs a database step; its failure becomes database_unavailable naming what could not be done. */
async function inDatabase<T>(what: string, run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (cause) {
    throw new CliError(
      'database_unavailable',
      `could not ${what}: ${cause instanceof Error ? cause.message : String(cause)}`,
      { cause },
    );
  }
}

export async function listAlerts(
  pool: pg.Pool,
  cmd: Extract<Of<'alerts'>, { action: 'list' }>,
  io: CommandIo,
): Promise<void> {
  const rows = await inDatabase('list alerts', () =>
    listOutbox(pool, {
      ...(cmd.consumerId === undefined ? {} : { consumerId: cmd.consumerId }),
      ...(cmd.state === undefined ? {} : { state: OUTBOX_STATE_OF[cmd.state] }),
      limit: cmd.limit,
    }),
  );
  if (cmd.json) {
    for (const row of rows) io.out(JSON.stringify(alertJson(row)));
    return;
  }
  if (rows.length === 0) {
    io.out('no alerts match');
    return;
  }
  io.out(formatAlertsTable(rows, Date.now()));
  if (rows.length === cmd.limit) io.out(`(the newest ${cmd.limit}; there may be more: --limit N)`);
}

/** The states each operation takes an alert from, as its messages name them. */
const MOVABLE = { retry: 'dead or suppressed', drop: 'pending or dead' } as const;
const TAKES = {
  retry: 'retry takes dead or suppressed alerts',
  drop: 'drop takes pending or dead alerts, not one being sent',
} as const;

/**
 * `alerts retry` (dead or suppressed → pending, attempts from 0, same key) and `alerts drop` (pending or dead →
 * dropped), each audited as a decision of kind `alert`. Nothing moved is nothing_matched (exit 1).
 */
export async function moveAlerts(
  pool: pg.Pool,
  cmd: Extract<Of<'alerts'>, { action: 'retry' | 'drop' }>,
  io: CommandIo,
): Promise<void> {
  const decision = { actor: cmd.actor, reason: cmd.reason };
  const { selection } = cmd;
  const moved = await inDatabase(`${cmd.action} alerts`, () =>
    cmd.action === 'retry' ? retryOutbox(pool, selection, decision) : dropOutbox(pool, selection, decision),
  );
  const named = 'ids' in selection ? selection.ids : null;
  if (moved.length === 0) {
    const what = !named
      ? `no dead alerts${'consumerId' in selection && selection.consumerId !== undefined ? ` of consumer ${selection.consumerId}` : ''}`
      : named.length === 1
        ? `alert ${named[0]} is not ${MOVABLE[cmd.action]}`
        : `none of alerts ${named.join(', ')} is ${MOVABLE[cmd.action]}`;
    throw new CliError(
      'nothing_matched',
      `alerts ${cmd.action}: nothing matched: ${what}; ${TAKES[cmd.action]} (see: whalehunt-consumer alerts list)`,
    );
  }
  io.out(
    cmd.action === 'retry'
      ? `${moved.length} alert(s) pending again (attempts from 0, same idempotency keys): ids ${moved.join(', ')}`
      : `${moved.length} alert(s) dropped (never sent): ids ${moved.join(', ')}`,
  );
  const untouched = named?.filter((id) => !moved.includes(id)) ?? [];
  if (untouched.length > 0) io.out(`left alone: ids ${untouched.join(', ')} (not ${MOVABLE[cmd.action]})`);
  io.out(`audited: alert decision ${cmd.action} by ${cmd.actor}: ${cmd.reason}`);
}
