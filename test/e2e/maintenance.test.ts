// Retention run as the project runs everything (docs/design.md#retention), on the real stack: Temporal, Postgres,
// the reference stream server, the compiled CLI and worker. A consumer streams; the stream's floor moves; the next
// hello tells the consumer; `whalehunt-consumer maintenance` (maintenanceWorkflow on the worker) removes the receipts
// below the floor while the consumer goes on committing; the database still equals the reference fold. Then the
// events whose receipts are gone come back (a redelivery in the same history, a rebuilt history the operator replays
// from its floor) and apply nothing twice: the execution revisions, which maintenance never removes, recognise them.
// A second test checks the schedule a worker process creates as it starts, a triggered run, and the metrics.
import { spawn } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { WorkflowHandle } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { describe, expect, it } from 'vitest';
import type { MaintenanceReport } from '../../db/index.js';
import { addDecimal, formatDecimal, notional, parseDecimal, type Decimal } from '../../protocol/decimal.js';
import type { JournalEvent, NewTransition } from '../../simulator/journal-types.js';
import { ReferenceStreamServer } from '../../simulator/server.js';
import { ensureMaintenanceSchedule } from '../../worker/maintenance-schedule.js';
import {
  kindSearchAttribute,
  maintenanceScheduleId,
  phaseSearchAttribute,
  statusQuery,
} from '../../workflows/definitions.js';
import { appliedEvents } from '../db/reference-fold.js';
import { dumpState, type SavedState } from '../db/state-dump.js';
import { runCli } from '../support/cli.js';
import { useTestDatabase } from '../support/db.js';
import { stopChildProcess, useResources } from '../support/leaks.js';
import { parseExposition, sampleValue } from '../support/prometheus.js';
import {
  createTestClient,
  sharedWorkflowBundlePath,
  temporalTarget,
  uniqueTaskQueue,
  waitFor,
} from '../support/temporal.js';
import { logLinesWith, spawnWorker } from '../support/worker-process.js';
import {
  API_KEY,
  correction,
  journalOf,
  testWorkerEnv,
  trade,
  waitForPhase,
  savedCheckpoint,
  withConsumerStack,
  within,
} from './consumer-harness.js';
import { expectReplayable } from './replay-check.js';

const db = useTestDatabase();
const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** Positions 1..12: trades, corrections and whales (a notional of 10 or more) on two markets. */
const HISTORY: NewTransition[] = [
  { events: [trade('a1', 'mA', '0.5', '2', { eventId: 'ev-a1' })] },
  { events: [trade('a2', 'mB', '0.5', '40', { eventId: 'ev-a2' })] },
  { events: [{ ...correction('a1', 'mA', 2, '0.5', '4'), eventId: 'ev-a1c' }] },
  { events: [trade('a3', 'mA', '0.25', '8', { eventId: 'ev-a3' })] },
  { events: [{ ...correction('a2', 'mB', 2, '0.6', '40'), eventId: 'ev-a2c' }] },
  { events: [trade('a4', 'mB', '0.9', '30', { eventId: 'ev-a4' })] },
  { events: [trade('a5', 'mA', '0.1', '10'), trade('a6', 'mB', '0.2', '10')] },
  { events: [correction('a3', 'mA', 2, '0.25', '12')] },
  { events: [trade('a7', 'mA', '0.3', '3')] },
  { events: [correction('a5', 'mA', 2, '0.1', '20'), correction('a4', 'mB', 2, '0.95', '30')] },
  { events: [trade('a8', 'mB', '0.4', '5')] },
  { events: [correction('a7', 'mA', 2, '0.3', '6')] },
];

/** Executions and volumes as the reference fold has them: every event applied once, in journal order. */
function foldedEffects(events: readonly JournalEvent[]): Pick<SavedState, 'executions' | 'volumes'> {
  const state = new Map<string, { revision: number; market: string; price: string; size: string }>();
  for (const e of appliedEvents(events)) {
    const data = e.data as { market: string; price: string; size: string };
    state.set(e.entityId, { revision: e.revision, ...data });
  }
  const volumes = new Map<string, { volume: Decimal; count: number }>();
  for (const s of state.values()) {
    const v = volumes.get(s.market) ?? { volume: parseDecimal('0'), count: 0 };
    volumes.set(s.market, {
      volume: addDecimal(v.volume, parseDecimal(notional(s.price, s.size))),
      count: v.count + 1,
    });
  }
  return {
    executions: [...state]
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([entityId, s]) => ({
        entityId,
        revision: s.revision,
        market: s.market,
        price: s.price,
        size: s.size,
        notional: notional(s.price, s.size),
      })),
    volumes: Object.fromEntries(
      [...volumes].sort(([a], [b]) => (a < b ? -1 : 1)).map(([m, v]) => [m, `${formatDecimal(v.volume)}/${v.count}`]),
    ),
  };
}

/** What an applied event changes: executions, their revisions, volumes, alerts. Receipts and checkpoint aside. */
async function effects(consumerId: string) {
  const { executions, revisions, volumes, outbox, quarantine } = await dumpState(db.pool, consumerId);
  return { executions, revisions, volumes, outbox, quarantine };
}

async function receipts(consumerId: string): Promise<{ eventId: string; position: number; outcome: string }[]> {
  const { rows } = await db.pool.query<{ event_id: string; position: string; outcome: string }>(
    'SELECT event_id, position, outcome FROM event_receipts WHERE consumer_id = $1 ORDER BY position, event_id',
    [consumerId],
  );
  return rows.map((r) => ({ eventId: r.event_id, position: Number(r.position), outcome: r.outcome }));
}

async function savedFloor(consumerId: string): Promise<{ historyId: string; floor: number; prunedBelow: number }> {
  const { rows } = await db.pool.query<{ history_id: string; floor: string; pruned_below: string }>(
    'SELECT history_id, floor, pruned_below FROM retention_floors WHERE consumer_id = $1',
    [consumerId],
  );
  const row = rows[0];
  return row
    ? { historyId: row.history_id, floor: Number(row.floor), prunedBelow: Number(row.pruned_below) }
    : { historyId: '', floor: 0, prunedBelow: 0 };
}

async function currentDetails(handle: WorkflowHandle): Promise<string> {
  const metadata = await handle.query<{ currentDetails?: string }>('__temporal_workflow_metadata');
  return metadata.currentDetails ?? '';
}

/** The checkpoint row's count of applied events (every commit adds its applied ones). */
async function appliedCounter(consumerId: string): Promise<number> {
  const { rows } = await db.pool.query<{ events_applied: string }>(
    'SELECT events_applied FROM checkpoints WHERE consumer_id = $1',
    [consumerId],
  );
  return Number(rows[0]!.events_applied);
}

describe('maintenance on the real stack', () => {
  const res = useResources();

  it('removes receipts below the floor while the consumer streams; what comes back after applies nothing twice', async () => {
    const consumerId = 'maint-1';
    const journal = journalOf(HISTORY);
    // Every event the journal ever held, in order: the fold's input (a floor drops them from the journal).
    const events: JournalEvent[] = [...journal.range(0, journal.head)].flatMap((t) => t.events);
    journal.onAppend((t) => events.push(...t.events));
    const env = { WHALE_ALERT_MIN_NOTIONAL: '10' };
    await withConsumerStack(res, db, { journal, env }, async (stack) => {
      const cli = (...args: string[]) =>
        runCli(
          {
            TEMPORAL_ADDRESS: temporalTarget().address,
            TEMPORAL_NAMESPACE: temporalTarget().namespace,
            TASK_QUEUE: stack.taskQueue,
            DATABASE_URL: db.url,
          },
          ...args,
        );
      // The database's committed position: the workflow's copy is only as fresh as its last progress signal.
      const committed = (position: number) =>
        waitFor(async () => (await savedCheckpoint(db.pool, consumerId)).position >= position, {
          description: `position ${position} committed`,
          timeoutMs: 60_000,
        });
      const handle = await stack.startConsumer({ consumerId, leaseMs: 30_000 });
      await committed(12);
      expect(await savedFloor(consumerId)).toEqual({ historyId: journal.historyId, floor: 1, prunedBelow: 0 });

      // Position 13 repeats three events of the history (duplicates now: their receipts name positions 1..3); a
      // rebuilt history will carry them after their receipts are gone.
      journal.redeliver(['ev-a1', 'ev-a1c', 'ev-a2']);
      // Live trades all along (below the whale threshold), so maintenance runs while the consumer commits.
      let live = 0;
      const appender = setInterval(() => {
        live += 1;
        journal.append({ events: [trade(`live-${live}`, 'mL', '0.1', '1')] });
      }, 50);
      try {
        await committed(15);
        const replayed = await receipts(consumerId);
        expect(replayed.filter((r) => r.position === 13)).toEqual([]);

        // The provider drops positions 1..12. The open session does not say so; the next hello does.
        journal.setRetentionFloor(13);
        stack.server.faults.dropAfterFrames = 1;
        await waitFor(async () => (await savedFloor(consumerId)).floor === 13, {
          description: 'the floor of the next hello saved',
          timeoutMs: 30_000,
        });
        const below = (await receipts(consumerId)).filter((r) => r.position < 13);
        expect(below).toHaveLength(14);
        const kept = (await receipts(consumerId)).filter((r) => r.position >= 13);

        const before = (await savedCheckpoint(db.pool, consumerId)).position;
        const ran = await cli('maintenance', '--json', '--actor', 'ops');
        expect(ran, ran.stderr).toMatchObject({ code: 0 });
        const report = JSON.parse(ran.stdout) as MaintenanceReport & { workflowId: string };
        expect(report).toMatchObject({ receiptsDeleted: 14, outboxDeleted: 0, revisionsDeleted: 0 });
        expect(report.consumers).toEqual([
          { consumerId, historyId: journal.historyId, floor: 13, prunedBelow: 13, receiptsDeleted: 14 },
        ]);
        // The consumer went on committing through the run.
        await committed(before + 3);
        expect((await handle.query(statusQuery)).phase).toBe('streaming');
        const after = await receipts(consumerId);
        expect(after.filter((r) => r.position < 13)).toEqual([]);
        expect(after).toEqual(expect.arrayContaining(kept));
        expect(await savedFloor(consumerId)).toEqual({ historyId: journal.historyId, floor: 13, prunedBelow: 13 });

        // The run as the Temporal UI shows it: its phase and kind, and the report in Current Details.
        const run = stack.client.workflow.getHandle(report.workflowId);
        stack.track(run);
        const described = await run.describe();
        expect(described.typedSearchAttributes.get(phaseSearchAttribute)).toBe('maintained');
        expect(described.typedSearchAttributes.get(kindSearchAttribute)).toBe('maintenance');
        const details = await currentDetails(run);
        expect(details).toContain('## Maintenance: maintained');
        expect(details).toContain('Requested by ops (whalehunt-consumer maintenance)');
        expect(details).toContain('| removed | 14 receipts, 0 outbox rows, 0 revisions |');
        expect(details).toContain(`| ${consumerId} | ${journal.historyId} | 13 | 13 | 14 |`);
        expect(details).toMatch(/\| run \| \d+: \d\d:\d\d:\d\d UTC to \d\d:\d\d:\d\d UTC, [\d,]+ ms \|/);
        // `status` shows the run and the tables.
        const status = await cli('status', '--consumer', consumerId);
        expect(status.stdout).toMatch(/maintenance\s+succeeded \S+: removed 14 receipts, 0 outbox rows, 0 revisions/);
        expect(status.stdout).toMatch(/tables\s+.*event_receipts [\d.]+ kB/);
        const statusJson = JSON.parse((await cli('status', '--consumer', consumerId, '--json')).stdout) as {
          retention: { lastRun: { id: number; status: string }; tables: { table: string; tableBytes: number }[] };
        };
        expect(statusJson.retention.lastRun).toMatchObject({ id: report.runId, status: 'succeeded' });
        expect(statusJson.retention.tables.map((t) => t.table)).toContain('event_receipts');
      } finally {
        clearInterval(appender);
      }
      await within(
        stack.server.waitForAck((a) => a.consumerId === consumerId && a.position === journal.head),
        60_000,
        'the ACK of the head',
      );
      // Everything the consumer applied, the removed receipts' events included, equals the fold.
      const settled = await effects(consumerId);
      expect({ executions: settled.executions, volumes: settled.volumes }).toEqual(foldedEffects(events));
      const applied = await appliedCounter(consumerId);

      // A redelivery of events whose receipts are gone: a known trade, a correction at the saved revision, a whale.
      journal.redeliver(['ev-a3', 'ev-a2c', 'ev-a4']);
      await committed(journal.head);
      expect(await effects(consumerId)).toEqual(settled);
      expect(await appliedCounter(consumerId)).toBe(applied);
      const redelivered = (await receipts(consumerId)).filter((r) => r.position === journal.head);
      expect(redelivered.map((r) => [r.eventId, r.outcome]).sort()).toEqual([
        ['ev-a2c', 'no_effect'],
        ['ev-a3', 'no_effect'],
        ['ev-a4', 'no_effect'],
      ]);

      // The provider rebuilds its history: the retained events (13..) at new positions, the three of position 13
      // without their receipts. The consumer stops; a maintenance run meanwhile leaves the unbound history alone.
      journal.rebuildHistory({ shift: 100 });
      const waiting = await waitForPhase(handle, 'awaiting_gap_decision');
      expect(waiting.stop?.reason).toContain('history_rebuilt');
      await waitFor(async () => (await savedFloor(consumerId)).historyId === journal.historyId, {
        description: "the rebuilt history's floor saved",
      });
      const unbound = await cli('maintenance', '--json');
      expect(unbound, unbound.stderr).toMatchObject({ code: 0 });
      expect((JSON.parse(unbound.stdout) as MaintenanceReport).consumers).toEqual([
        {
          consumerId,
          historyId: journal.historyId,
          floor: 1,
          prunedBelow: 0,
          receiptsDeleted: 0,
          skipped: 'history_not_bound',
        },
      ]);
      stack.track(stack.client.workflow.getHandle((JSON.parse(unbound.stdout) as { workflowId: string }).workflowId));

      // The operator replays the rebuilt history from its floor.
      const decided = await cli(
        ...['resolve-gap', '--consumer', consumerId, '--decision', 'from_floor', '--actor', 'ops'],
        ...['--reason', 'the provider rebuilt its history'],
      );
      expect(decided, decided.stderr).toMatchObject({ code: 0 });
      await within(
        stack.server.waitForAck((a) => a.consumerId === consumerId && a.position === journal.head),
        60_000,
        'the ACK of the rebuilt head',
      );
      expect(await effects(consumerId)).toEqual(settled);
      expect(await appliedCounter(consumerId)).toBe(applied);
      // The three events met again without receipts were recognised by their executions' revisions.
      const rebuilt = (await receipts(consumerId)).filter((r) => ['ev-a1', 'ev-a1c', 'ev-a2'].includes(r.eventId));
      expect(rebuilt.map((r) => [r.eventId, r.outcome, r.position])).toEqual([
        ['ev-a1', 'no_effect', 101],
        ['ev-a1c', 'no_effect', 101],
        ['ev-a2', 'no_effect', 101],
      ]);
    });
  });

  it('a worker process creates the schedule once, a triggered run reports, and the metrics show it', async () => {
    const server = res.track(
      await ReferenceStreamServer.start({ journal: journalOf(HISTORY), apiKeys: [API_KEY] }),
      (s) => s.close(),
      'reference stream',
    );
    const testClient = res.track(await createTestClient());
    const taskQueue = uniqueTaskQueue('maintenance');
    const scheduleId = maintenanceScheduleId(taskQueue);
    const env = {
      ...testWorkerEnv({ databaseUrl: db.url, taskQueue, streamUrl: server.url, apiKey: API_KEY }),
      WORKFLOW_BUNDLE_PATH: sharedWorkflowBundlePath(),
      METRICS_PORT: '0',
      METRICS_HOST: '127.0.0.1',
      MAINTENANCE_EVERY: '1h',
    };
    const worker = spawnWorker(env);
    res.track(worker.child, (c) => stopChildProcess(c), 'worker process');
    const created = await waitFor(() => Promise.resolve(logLinesWith(worker, 'maintenance schedule created')[0]), {
      description: 'the schedule created at start',
    });
    expect(created).toMatchObject({ scheduleId, every: '1h' });
    const schedule = testClient.client.schedule.getHandle(scheduleId);
    try {
      const description = await schedule.describe();
      expect(description.spec.intervals).toMatchObject([{ every: 3_600_000 }]);
      expect(description.policies.overlap).toBe('SKIP');
      expect(description.action).toMatchObject({ workflowType: 'maintenanceWorkflow', taskQueue });
      // Runs of another deployment's schedule, ticking at the same times, never take this one's workflow ids.
      expect(description.action.workflowId).toBe(`whalehunt-maintenance-run:${scheduleId}`);

      // A second worker of the deployment, with another interval, leaves the schedule as it is.
      const second = spawnWorker({ ...env, MAINTENANCE_EVERY: '30m', METRICS_PORT: '' });
      res.track(second.child, (c) => stopChildProcess(c), 'second worker process');
      await waitFor(() => Promise.resolve(logLinesWith(second, 'maintenance schedule exists; left as it is')[0]), {
        description: 'the second worker finding the schedule',
      });
      expect((await schedule.describe()).spec.intervals).toMatchObject([{ every: 3_600_000 }]);
      expect(
        await ensureMaintenanceSchedule(testClient.connection, {
          taskQueue,
          maintenance: { every: '1m' },
          temporal: temporalTarget(),
        }),
      ).toEqual({ schedule: 'exists', scheduleId });
      await res.close(second.child);

      // Alerts sent 40 and 5 days ago: the worker's OUTBOX_RETENTION_DAYS (30 by default) removes the first only.
      await db.pool.query(
        `INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload, status, attempts,
                             created_at, updated_at, completed_at)
         SELECT 'maint-old', 'whale_alert:' || e, e, 'whale_alert', '{}', 'done', 1, t, t, t
           FROM (VALUES ('ev-sent-40d', now() - interval '40 days'), ('ev-sent-5d', now() - interval '5 days')) AS v(e, t)`,
      );
      await schedule.trigger();
      const started = await waitFor(async () => (await schedule.describe()).info.recentActions[0], {
        description: 'the triggered run',
      });
      const run = testClient.client.workflow.getHandle(started.action.workflow.workflowId);
      const report = (await run.result()) as MaintenanceReport;
      expect(report).toMatchObject({ receiptsDeleted: 0, outboxDeleted: 1, revisionsDeleted: 0 });
      const alerts = await db.pool.query<{ event_id: string }>(
        `SELECT event_id FROM outbox WHERE consumer_id = 'maint-old'`,
      );
      expect(alerts.rows).toEqual([{ event_id: 'ev-sent-5d' }]);
      expect((await run.describe()).typedSearchAttributes.get(phaseSearchAttribute)).toBe('maintained');
      expect(await currentDetails(run)).toContain(`Requested by schedule ${scheduleId}`);

      const listening = logLinesWith(worker, 'metrics endpoint listening')[0]!;
      const samples = parseExposition(await (await fetch(String(listening.metrics))).text());
      expect(sampleValue(samples, 'whalehunt_table_bytes', { table: 'event_receipts' })).toBeGreaterThan(0);
      expect(sampleValue(samples, 'whalehunt_table_index_bytes', { table: 'event_receipts' })).toBeGreaterThan(0);
      expect(sampleValue(samples, 'whalehunt_maintenance_last_run_status', { status: 'succeeded' })).toBe(1);
      expect(sampleValue(samples, 'whalehunt_maintenance_last_run_status', { status: 'failed' })).toBe(0);
      const end = sampleValue(samples, 'whalehunt_maintenance_last_run_end_timestamp_seconds', {});
      expect(end).toBe(Math.floor(Date.parse(report.finishedAt) / 1000));
      const removed = (table: string) => sampleValue(samples, 'whalehunt_maintenance_rows_removed_total', { table });
      expect([removed('event_receipts'), removed('outbox'), removed('execution_revisions')]).toEqual([0, 1, 0]);
    } finally {
      await schedule.delete();
    }
    worker.child.kill('SIGTERM');
    expect(await worker.exited).toEqual({ code: 0, signal: null });
    await res.close(worker.child);
    await res.close(testClient);
    await res.close(server);
  });

  it('a run that fails says so: phase failed, the cause in Current Details and in the CLI (exit 1)', async () => {
    const journal = journalOf(HISTORY);
    const overrideActivities = () => ({
      runMaintenance: () =>
        Promise.reject(ApplicationFailure.create({ type: 'StorageFailure', message: 'disk full', nonRetryable: true })),
    });
    await withConsumerStack(res, db, { journal, overrideActivities }, async (stack) => {
      const ran = await runCli(
        {
          TEMPORAL_ADDRESS: temporalTarget().address,
          TEMPORAL_NAMESPACE: temporalTarget().namespace,
          TASK_QUEUE: stack.taskQueue,
        },
        'maintenance',
      );
      expect(ran.code).toBe(1);
      const [, workflowId] = /^maintenance workflow (\S+) started/.exec(ran.stdout) ?? [];
      expect(ran.stderr).toContain(
        `error (maintenance_failed): maintenance workflow ${workflowId} failed: disk full (the next run goes on from where it stopped)`,
      );
      const run = stack.client.workflow.getHandle(workflowId!);
      stack.track(run);
      expect((await run.describe()).typedSearchAttributes.get(phaseSearchAttribute)).toBe('failed');
      const details = await currentDetails(run);
      expect(details).toContain('## Maintenance: failed');
      expect(details).toContain(`(workflow ${workflowId!}): disk full`);
    });
  });

  it('with no worker on its task queue, `maintenance` says so at once, and waits', async () => {
    const testClient = res.track(await createTestClient());
    const taskQueue = uniqueTaskQueue('maintenance-nobody');
    const child = spawn(process.execPath, [join(repoRoot, 'dist/cli/main.js'), 'maintenance'], {
      cwd: repoRoot,
      env: {
        ...process.env,
        TEMPORAL_ADDRESS: temporalTarget().address,
        TEMPORAL_NAMESPACE: temporalTarget().namespace,
        TASK_QUEUE: taskQueue,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    res.track(child, (c) => stopChildProcess(c), 'maintenance CLI');
    const out: string[] = [];
    const err: string[] = [];
    createInterface({ input: child.stdout }).on('line', (line) => out.push(line));
    createInterface({ input: child.stderr }).on('line', (line) => err.push(line));
    // Within 10 s, so before the CLI's 15 s re-check: it looks for pollers as soon as the run has started.
    const hint = await waitFor(() => Promise.resolve(err.find((line) => line.startsWith('waiting: '))), {
      description: "the CLI's hint",
      timeoutMs: 10_000,
    });
    expect(hint).toBe(`waiting: no worker polls task queue ${taskQueue}; start one (npm run worker)`);
    expect(child.exitCode).toBeNull();
    const [, workflowId] = /^maintenance workflow (\S+) started/.exec(out[0] ?? '') ?? [];
    await testClient.client.workflow.getHandle(workflowId!).terminate('test finished');
    await res.close(child);
    await res.close(testClient);
  });

  it('replays every recorded history without nondeterminism and no history holds the API key', async () => {
    await expectReplayable();
  });
});
