// The operator CLI as operators run it (`whalehunt-consumer`, i.e. the compiled dist/cli/main.js, as a child
// process) against the real stack: start, status (text and JSON, with the alert figures), a second start refused,
// pause/resume, a gap stop resolved by resolve-gap, list by phase, rebind and rebind schedules, held quarantine
// released by resolve-quarantine, and clear failures for an unknown consumer, an invalid or out-of-phase decision
// and a missing actor.
import { describe, expect, it } from 'vitest';
import type { ConsumerReport } from '../../cli/consumers.js';
import { consumerWorkflowId } from '../../workflows/definitions.js';
import { runCli } from '../support/cli.js';
import { useTestDatabase } from '../support/db.js';
import { useResources } from '../support/leaks.js';
import { temporalTarget, waitFor } from '../support/temporal.js';
import { correction, journalOf, trade, waitForPhase, withConsumerStack, within } from './consumer-harness.js';

const db = useTestDatabase();

describe('whalehunt-consumer CLI against the real stack', () => {
  const res = useResources();

  it('starts, reports, refuses a second start, and resolves a gap stop; errors name the problem', async () => {
    const consumerId = 'cli-1';
    const journal = journalOf([1, 2, 3, 4].map((i) => ({ events: [trade(`c${i}`, 'mA', '0.5', '2')] })));
    await withConsumerStack(res, db, { journal }, async ({ server, client, taskQueue, track }) => {
      const env = {
        TEMPORAL_ADDRESS: temporalTarget().address,
        TEMPORAL_NAMESPACE: temporalTarget().namespace,
        TASK_QUEUE: taskQueue,
        DATABASE_URL: db.url,
      };
      const run = (...args: string[]) => runCli(env, ...args);

      const started = await run(
        'start',
        '--consumer',
        consumerId,
        '--start',
        'from_floor',
        '--subscription',
        'sub-cli',
        '--lease-ms',
        '3000',
      );
      expect(started, started.stderr).toMatchObject({ code: 0 });
      expect(started.stdout).toContain(`started consumer ${consumerId}`);
      const handle = client.workflow.getHandle(consumerWorkflowId(consumerId));
      track(handle);
      await within(
        server.waitForAck((a) => a.consumerId === consumerId && a.position === 4),
        60_000,
        'the ACK of checkpoint 4',
      );

      const again = await run('start', '--consumer', consumerId, '--start', 'live_cut');
      expect(again.code).toBe(1);
      expect(again.stderr).toContain(`error (already_running): consumer "${consumerId}" is already running`);

      // Nothing to resume while it streams: refused with a non-zero exit, and no signal reaches the workflow.
      const notPaused = await run('resume', '--consumer', consumerId, '--actor', 'ops', '--reason', 'too early');
      expect(notPaused.code).toBe(1);
      expect(notPaused.stderr).toContain(
        `error (not_paused): consumer "${consumerId}" is not paused (phase streaming): nothing to resume`,
      );

      // Alerts as the commit and a dispatcher leave them (no dispatcher runs here): one waiting, one failed for good.
      await db.pool.query(
        `INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload, status, attempts, last_error, created_at)
         VALUES ($1, 'whale_alert:c-waiting', 'c-waiting', 'whale_alert', '{}', 'pending', 0, NULL, now() - interval '125 seconds'),
                ($1, 'whale_alert:c-dead', 'c-dead', 'whale_alert', '{}', 'dead', 10, 'webhook http://127.0.0.1:9 unreachable', now())`,
        [consumerId],
      );
      const text = await run('status', '--consumer', consumerId);
      expect(text, text.stderr).toMatchObject({ code: 0 });
      expect(text.stdout).toMatch(/phase\s+streaming/);
      expect(text.stdout).toMatch(/position\s+4\s/);
      expect(text.stdout).toMatch(/executions\s+4\s+markets 1\s+volume 4 USD/);
      expect(text.stdout).toMatch(
        /alerts\s+1 pending \(oldest 2m \d\ds\), 1 dead \(see: whalehunt-consumer alerts list --consumer cli-1 --state dead\)/,
      );
      const json = await run('status', '--consumer', consumerId, '--json');
      const report = JSON.parse(json.stdout) as ConsumerReport;
      expect(report.status?.phase).toBe('streaming');
      expect(report.database).toMatchObject({
        executions: 4,
        totalVolume: '4',
        heldQuarantine: 0,
        pendingOutbox: 1,
        alerts: { pending: 1, dead: 1 },
        state: { position: 4, generation: 1 },
      });
      expect(report.database?.alerts.oldestPendingSeconds).toBeGreaterThanOrEqual(125);

      // Paused at a checkpoint boundary, the consumer misses transitions that fall below the retention floor.
      expect(
        (await run('pause', '--consumer', consumerId, '--actor', 'ops', '--reason', 'maintenance window')).code,
      ).toBe(0);
      await waitForPhase(handle, 'paused');
      for (const i of [5, 6, 7, 8]) journal.append({ events: [trade(`c${i}`, 'mA', '0.5', '2')] });
      journal.setRetentionFloor(7);
      expect(
        (await run('resume', '--consumer', consumerId, '--actor', 'ops', '--reason', 'maintenance over')).code,
      ).toBe(0);
      await waitForPhase(handle, 'awaiting_gap_decision');

      const waiting = await run('status', '--consumer', consumerId);
      expect(waiting.stdout).toMatch(/phase\s+awaiting_gap_decision/);
      expect(waiting.stdout).toMatch(
        /resolve with\s+node dist\/cli\/main.js resolve-gap --consumer cli-1 --decision from_floor/,
      );
      const listed = await run('list', '--phase', 'awaiting_gap_decision', '--json');
      expect(
        listed.stdout
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l) as { consumerId: string }),
      ).toContainEqual(expect.objectContaining({ consumerId, phase: 'awaiting_gap_decision', status: 'RUNNING' }));

      // Invalid input never reaches the workflow: usage errors (exit 2) name the option and what was wrong.
      const invalid = await run(
        'resolve-gap',
        '--consumer',
        consumerId,
        '--decision',
        'retry',
        '--actor',
        'ops',
        '--reason',
        'x',
      );
      expect(invalid.code).toBe(2);
      expect(invalid.stderr).toContain('invalid --decision "retry"; expected one of from_floor, live_cut, abandon');
      // --actor defaults to the OS user; a reason is always required.
      const noReason = await run('resolve-gap', '--consumer', consumerId, '--decision', 'live_cut', '--actor', 'ops');
      expect(noReason.code).toBe(2);
      expect(noReason.stderr).toContain('--reason is required');
      // A decision the consumer is not waiting for is rejected by the workflow's update validator.
      const wrongPhase = await run(
        'resolve-binding',
        '--consumer',
        consumerId,
        '--decision',
        'retry',
        '--actor',
        'ops',
        '--reason',
        'x',
      );
      expect(wrongPhase.code).toBe(1);
      expect(wrongPhase.stderr).toContain('error (decision_rejected)');
      expect(wrongPhase.stderr).toContain('not awaiting_binding_decision');
      const unknown = await run(
        'resolve-gap',
        '--consumer',
        'nobody',
        '--decision',
        'live_cut',
        '--actor',
        'ops',
        '--reason',
        'x',
      );
      expect(unknown.code).toBe(1);
      expect(unknown.stderr).toContain('error (unknown_consumer): unknown consumer "nobody"');
      const unknownStatus = await run('status', '--consumer', 'nobody');
      expect(unknownStatus.code).toBe(1);
      expect(unknownStatus.stderr).toContain('unknown consumer "nobody"');

      const resolved = await run(
        'resolve-gap',
        '--consumer',
        consumerId,
        '--decision',
        'from_floor',
        '--actor',
        'ops',
        '--reason',
        'positions 5-6 are gone',
      );
      expect(resolved, resolved.stderr).toMatchObject({ code: 0 });
      expect(resolved.stdout).toContain(`gap decision from_floor recorded for ${consumerId} by ops`);
      await within(
        server.waitForAck((a) => a.consumerId === consumerId && a.position === 8),
        60_000,
        'the ACK of checkpoint 8',
      );

      const after = JSON.parse((await run('status', '--consumer', consumerId, '--json')).stdout) as ConsumerReport;
      expect(after.database).toMatchObject({
        executions: 6,
        state: { position: 8 },
        lastDecision: { kind: 'gap', decision: 'from_floor', actor: 'ops', reason: 'positions 5-6 are gone' },
      });
    });
  });

  it('rebinds a running consumer and manages its rebind schedule', async () => {
    const consumerId = 'cli-2';
    const journal = journalOf(
      [trade('r1', 'mA', '0.5', '2'), trade('r2', 'mB', '0.5', '2')].map((event) => ({ events: [event] })),
    );
    await withConsumerStack(res, db, { journal }, async ({ server, client, taskQueue, track }) => {
      const env = {
        TEMPORAL_ADDRESS: temporalTarget().address,
        TEMPORAL_NAMESPACE: temporalTarget().namespace,
        TASK_QUEUE: taskQueue,
        DATABASE_URL: db.url,
      };
      const run = (...args: string[]) => runCli(env, ...args);

      expect((await run('start', '--consumer', consumerId, '--start', 'from_floor', '--lease-ms', '3000')).code).toBe(
        0,
      );
      track(client.workflow.getHandle(consumerWorkflowId(consumerId)));
      await within(
        server.waitForAck((a) => a.consumerId === consumerId && a.position === 2),
        60_000,
        'the ACK of checkpoint 2',
      );

      const badFilter = await run('rebind', '--consumer', consumerId, '--filter', '{"market":"mA"}', '--actor', 'ops');
      expect(badFilter.code).toBe(2);
      expect(badFilter.stderr).toContain('rebind: invalid filter');
      const rebound = await run('rebind', '--consumer', consumerId, '--markets', 'mA', '--actor', 'ops');
      expect(rebound, rebound.stderr).toMatchObject({ code: 0 });
      expect(rebound.stdout).toContain('generation 2 starts at the next checkpoint boundary');
      await within(
        server.waitForAck((a) => a.consumerId === consumerId && a.generation === 2),
        60_000,
        'an ACK at generation 2',
      );
      journal.append({ events: [trade('r3', 'mA', '0.5', '2')] });
      journal.append({ events: [trade('r4', 'mB', '0.5', '2')] });
      await within(
        server.waitForAck((a) => a.consumerId === consumerId && a.position === 4),
        60_000,
        'the ACK of checkpoint 4',
      );
      const report = JSON.parse((await run('status', '--consumer', consumerId, '--json')).stdout) as ConsumerReport;
      // The new filter applies after the rebind point: r4 (market mB) is filtered out.
      expect(report.database).toMatchObject({
        executions: 3,
        state: { generation: 2, position: 4, binding: { filter: { markets: ['mA'] } } },
      });

      const created = await run(
        'schedule-rebind',
        'create',
        '--consumer',
        consumerId,
        '--markets',
        'mA,mB',
        '--every',
        '6h',
        '--actor',
        'ops',
      );
      expect(created, created.stderr).toMatchObject({ code: 0 });
      expect(created.stdout).toContain('schedule whalehunt-rebind:cli-2 created');
      const twice = await run(
        'schedule-rebind',
        'create',
        '--consumer',
        consumerId,
        '--filter',
        '{}',
        '--cron',
        '0 3 * * *',
        '--actor',
        'ops',
      );
      expect(twice.code).toBe(1);
      expect(twice.stderr).toContain('error (schedule_exists)');
      const listed = await waitFor(
        async () => {
          const out = (await run('schedule-rebind', 'list', '--consumer', consumerId, '--json')).stdout.trim();
          return out === ''
            ? undefined
            : out
                .split('\n')
                .map((line) => JSON.parse(line) as { scheduleId: string; consumerId: string; paused: boolean });
        },
        { description: 'the schedule to be listed', timeoutMs: 30_000, intervalMs: 500 },
      );
      expect(listed).toEqual([
        expect.objectContaining({ scheduleId: 'whalehunt-rebind:cli-2', consumerId, paused: false }),
      ]);
      expect((await run('schedule-rebind', 'delete', '--consumer', consumerId)).code).toBe(0);
      const gone = await run('schedule-rebind', 'delete', '--consumer', consumerId);
      expect(gone.code).toBe(1);
      expect(gone.stderr).toContain('error (unknown_schedule): unknown schedule "whalehunt-rebind:cli-2"');
    });
  });

  it('shows held quarantine in status and releases the named event with resolve-quarantine', async () => {
    const consumerId = 'cli-3';
    const journal = journalOf([
      { events: [trade('k1', 'mA', '0.5', '2')] },
      { events: [trade('k2', 'mA', '0.5', '2')] },
      { events: [correction('ghost', 'mA', 2, '0.5', '8')] },
      { events: [trade('k3', 'mA', '0.5', '2')] },
    ]);
    await withConsumerStack(res, db, { journal }, async ({ server, client, taskQueue, track }) => {
      const env = {
        TEMPORAL_ADDRESS: temporalTarget().address,
        TEMPORAL_NAMESPACE: temporalTarget().namespace,
        TASK_QUEUE: taskQueue,
        DATABASE_URL: db.url,
      };
      const run = (...args: string[]) => runCli(env, ...args);
      expect((await run('start', '--consumer', consumerId, '--start', 'from_floor')).code).toBe(0);
      const handle = client.workflow.getHandle(consumerWorkflowId(consumerId));
      track(handle);
      await waitForPhase(handle, 'awaiting_quarantine_decision');

      const held = await run('status', '--consumer', consumerId);
      expect(held.stdout).toMatch(/quarantine\s+1 held/);
      expect(held.stdout).toMatch(/resolve with\s+node dist\/cli\/main.js resolve-quarantine --consumer cli-3/);
      const report = JSON.parse((await run('status', '--consumer', consumerId, '--json')).stdout) as ConsumerReport;
      expect(report.database?.heldQuarantine).toBe(1);
      const ghost = journal.at(2)!.events[0]!.eventId;

      const released = await run(
        'resolve-quarantine',
        '--consumer',
        consumerId,
        '--decision',
        'release_terminal',
        '--event',
        ghost,
        '--actor',
        'ops',
        '--reason',
        'never existed upstream',
      );
      expect(released, released.stderr).toMatchObject({ code: 0 });
      expect(released.stdout).toContain(
        `quarantine decision release_terminal (events ${ghost}) recorded for ${consumerId} by ops`,
      );
      await within(
        server.waitForAck((a) => a.consumerId === consumerId && a.position === 4),
        60_000,
        'the ACK of checkpoint 4',
      );
      const after = JSON.parse((await run('status', '--consumer', consumerId, '--json')).stdout) as ConsumerReport;
      expect(after.database).toMatchObject({
        heldQuarantine: 0,
        executions: 3,
        lastDecision: { kind: 'quarantine', decision: 'release_terminal', actor: 'ops' },
      });
    });
  });
});
