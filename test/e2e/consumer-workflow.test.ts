// The consumer workflow's branches with scripted activities on the run's Temporal dev server: the paths a
// real stream rarely takes on demand (a database behind the workflow, a decision that cannot be recorded,
// invalid operator input). The full-stack rows live in consumer-*.test.ts.
import { WorkflowFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { Context } from '@temporalio/activity';
import { describe, expect, it } from 'vitest';
import type { CommittedView } from '../../activities/index.js';
import type { CheckpointSummary, ConsumeOutcome, ConsumeStreamInput } from '../../activities/types.js';
import type { StreamFilter } from '../../protocol/codec.js';
import type { consumerWorkflow } from '../../workflows/consumer.js';
import type { rebindWorkflow } from '../../workflows/rebind.js';
import {
  consumerWorkflowId,
  resolveBindingSignal,
  resolveBindingUpdate,
  rebindUpdate,
  resolveGapUpdate,
  resumeSignal,
  type ConsumerWorkflowInput,
} from '../../workflows/definitions.js';
import { useResources } from '../support/leaks.js';
import { createTestClient, withWorker } from '../support/temporal.js';
import { updateRejection, waitForPhase, waitForStatus } from './consumer-harness.js';

type Step = ConsumeOutcome | Error;

const counters = {
  sessions: 1,
  checkpointsCommitted: 1,
  eventsApplied: 1,
  duplicates: 0,
  acksSent: 1,
  lastHeadPosition: 10,
  lastCommitAt: null,
};
const summary = (position: number, version = position): CheckpointSummary => ({
  position,
  token: `tok-${position}`,
  generation: 1,
  version,
  filterHash: 'sha256:f',
});
const view = (s: CheckpointSummary | null): CommittedView => ({
  summary: s ?? { position: null, token: null, generation: null, version: 0, filterHash: null },
  filter: s ? {} : null,
  pendingStart: null,
  abandoned: false,
});

/** consumeStream plays `script`; past its end a lease idles (heartbeating) until it is cancelled. */
function scriptedActivities(
  script: Step[],
  database: { committed: CheckpointSummary | null; unreachableReads?: number },
) {
  const calls: ConsumeStreamInput[] = [];
  const decisions: string[] = [];
  let failNextDecision = false;
  const activities = {
    async consumeStream(input: ConsumeStreamInput): Promise<ConsumeOutcome> {
      calls.push(input);
      const step = script.shift();
      if (step instanceof Error) throw step;
      if (step) {
        database.committed = step.committed;
        return step;
      }
      const ctx = Context.current();
      try {
        for (;;) {
          ctx.heartbeat();
          await ctx.sleep(200);
        }
      } catch {
        return { kind: 'cancelled', committed: database.committed ?? summary(0), counters };
      }
    },
    loadCommitted(): Promise<CommittedView> {
      if ((database.unreachableReads ?? 0) > 0) {
        database.unreachableReads! -= 1;
        return Promise.reject(ApplicationFailure.nonRetryable('connect ECONNREFUSED 127.0.0.1:5432', 'StorageFailure'));
      }
      return Promise.resolve(view(database.committed));
    },
    recordBindingDecision(input: { decision: string }): Promise<CommittedView> {
      if (failNextDecision) {
        failNextDecision = false;
        return Promise.reject(ApplicationFailure.nonRetryable('the database is unreachable', 'StorageFailure'));
      }
      decisions.push(`binding:${input.decision}`);
      return Promise.resolve(view(database.committed));
    },
  };
  return { activities, calls, decisions, script, failNextDecision: () => (failNextDecision = true) };
}

function input(consumerId: string): ConsumerWorkflowInput {
  return {
    consumerId,
    subscriptionId: 's',
    filter: {},
    initialStart: 'from_floor',
    leaseMs: 60_000,
    tuning: { heartbeatTimeoutMs: 5_000 },
  };
}

describe('consumer workflow branches (scripted activities)', () => {
  const res = useResources();

  it('a database behind the workflow stops it loudly; resume adopts the database checkpoint as the new expectation', async () => {
    const testClient = res.track(await createTestClient());
    const database = { committed: null as CheckpointSummary | null };
    const { activities, calls } = scriptedActivities(
      [
        { kind: 'rebound', generation: 1, committed: summary(5), counters },
        ApplicationFailure.create({
          type: 'DatabaseBehind',
          message: 'database for consumer wf-1 is behind the workflow: version 2 < expected 5',
          nonRetryable: true,
        }),
      ],
      database,
    );
    await withWorker({ activities }, async ({ taskQueue }) => {
      const handle = await testClient.client.workflow.start<typeof consumerWorkflow>('consumerWorkflow', {
        taskQueue,
        workflowId: consumerWorkflowId('wf-1'),
        args: [input('wf-1')],
      });
      const paused = await waitForPhase(handle, 'paused');
      expect(paused.stop?.reason).toMatch(/^DatabaseBehind: database for consumer wf-1 is behind the workflow/);
      expect(calls.map((c) => c.start.mode)).toEqual(['from_floor', 'resume']);
      expect(calls[1]!.expected).toEqual(summary(5));

      database.committed = summary(2); // the restored backup
      await handle.signal(resumeSignal, { actor: 'ops', reason: 'restored from backup; accept its checkpoint' });
      const resumed = await waitForStatus(handle, 'a lease after resume', () => calls.length === 3);
      expect(resumed.committed).toEqual(summary(2));
      expect(calls[2]).toMatchObject({ start: { mode: 'resume' }, expected: summary(2) });
      await handle.terminate('done');
    });
    await res.close(testClient);
  });

  it('binding decisions: invalid signals are ignored and reported, a decision that cannot be recorded fails its update and keeps waiting', async () => {
    const testClient = res.track(await createTestClient());
    const database = { committed: null as CheckpointSummary | null };
    const scripted = scriptedActivities(
      [
        { kind: 'rebound', generation: 1, committed: summary(3), counters },
        {
          kind: 'cursor_mismatch',
          message: 'the resume token does not belong to this binding',
          committed: summary(3),
          counters,
        },
      ],
      database,
    );
    await withWorker({ activities: scripted.activities }, async ({ taskQueue }) => {
      const handle = await testClient.client.workflow.start<typeof consumerWorkflow>('consumerWorkflow', {
        taskQueue,
        workflowId: consumerWorkflowId('wf-2'),
        args: [input('wf-2')],
      });
      const waiting = await waitForPhase(handle, 'awaiting_binding_decision');
      expect(waiting.stop?.reason).toBe('cursor_mismatch: the resume token does not belong to this binding');

      await handle.signal(resolveBindingSignal, { decision: 'retry', actor: '', reason: 'try again' });
      const ignored = await waitForStatus(handle, 'the ignored signal to be reported', (s) => s.lastError !== null);
      expect(ignored.lastError).toBe(
        'ignored resolveBinding signal: invalid binding resolution: actor: actor is required: who takes this decision',
      );
      expect(ignored.phase).toBe('awaiting_binding_decision');

      expect(
        await updateRejection(
          handle.executeUpdate(resolveGapUpdate, { args: [{ decision: 'from_floor', actor: 'ops', reason: 'x' }] }),
        ),
      ).toBe('consumer wf-2 is awaiting_binding_decision, not awaiting_gap_decision: no gap decision to take now');

      scripted.failNextDecision();
      expect(
        await updateRejection(
          handle.executeUpdate(resolveBindingUpdate, {
            args: [{ decision: 'retry', actor: 'ops', reason: 'binding restored' }],
          }),
        ),
      ).toBe('decision not recorded: the database is unreachable');
      expect((await waitForPhase(handle, 'awaiting_binding_decision')).lastError).toBe(
        'decision not recorded: the database is unreachable',
      );

      const after = await handle.executeUpdate(resolveBindingUpdate, {
        args: [{ decision: 'retry', actor: 'ops', reason: 'binding restored' }],
      });
      expect(after.phase).toBe('streaming');
      expect(scripted.decisions).toEqual(['binding:retry']);
      // retry repeats the same start with the exact saved binding.
      await waitForStatus(handle, 'the retried lease', () => scripted.calls.length === 3);
      expect(scripted.calls[2]!.start).toEqual({ mode: 'resume' });
      await handle.terminate('done');
    });
    await res.close(testClient);
  });

  it('rebind update: an invalid filter is rejected before history; a valid one cancels the lease, rebinds and switches filter', async () => {
    const testClient = res.track(await createTestClient());
    const database = { committed: null as CheckpointSummary | null };
    const scripted = scriptedActivities(
      [{ kind: 'rebound', generation: 1, committed: summary(3), counters }],
      database,
    );
    await withWorker({ activities: scripted.activities }, async ({ taskQueue }) => {
      const handle = await testClient.client.workflow.start<typeof consumerWorkflow>('consumerWorkflow', {
        taskQueue,
        workflowId: consumerWorkflowId('wf-3'),
        args: [input('wf-3')],
      });
      await waitForStatus(
        handle,
        'the idle resumed lease',
        (s) => s.committed?.position === 3 && scripted.calls.length === 2,
      );

      expect(
        await updateRejection(
          handle.executeUpdate(rebindUpdate, { args: [{ filter: { minNotional: 'lots' }, requestedBy: 'ops' }] }),
        ),
      ).toMatch(/^invalid rebind request: filter.minNotional/);

      scripted.script.push({
        kind: 'rebound',
        generation: 2,
        committed: { ...summary(3, 4), generation: 2 },
        counters,
      });
      const accepted = await handle.executeUpdate(rebindUpdate, {
        args: [{ filter: { kinds: ['trade'] }, requestedBy: 'ops' }],
      });
      expect(accepted.pendingRebind).toEqual({ filter: { kinds: ['trade'] }, requestedBy: 'ops' });
      const rebound = await waitForStatus(
        handle,
        'generation 2',
        (s) => s.committed?.generation === 2 && s.phase === 'streaming',
      );
      expect(rebound.filter).toEqual({ kinds: ['trade'] });
      expect(rebound.pendingRebind).toBeNull();
      expect(scripted.calls[2]!.start).toEqual({ mode: 'rebind', filter: { kinds: ['trade'] } });
      await handle.terminate('done');
    });
    await res.close(testClient);
  });

  it('a first start waits out an unreachable database on a durable timer, then starts explicitly', async () => {
    const testClient = res.track(await createTestClient());
    const database = { committed: null as CheckpointSummary | null, unreachableReads: 2 };
    const scripted = scriptedActivities([], database);
    await withWorker({ activities: scripted.activities }, async ({ taskQueue }) => {
      const handle = await testClient.client.workflow.start<typeof consumerWorkflow>('consumerWorkflow', {
        taskQueue,
        workflowId: consumerWorkflowId('wf-4'),
        args: [{ ...input('wf-4'), tuning: { backoffInitialMs: 200 } }],
      });
      const streaming = await waitForStatus(handle, 'the first lease', () => scripted.calls.length === 1);
      expect(streaming.phase).toBe('streaming');
      expect(streaming.lastError).toBe('could not read the committed checkpoint: connect ECONNREFUSED 127.0.0.1:5432');
      expect(scripted.calls[0]!.start).toEqual({ mode: 'from_floor', filter: {} });
      expect(database.unreachableReads).toBe(0);
      await handle.terminate('done');
    });
    await res.close(testClient);
  });

  it('a rebind workflow with an invalid filter (e.g. a schedule typo) fails at once instead of retrying', async () => {
    const testClient = res.track(await createTestClient());
    const scripted = scriptedActivities([], { committed: null });
    await withWorker({ activities: scripted.activities }, async ({ taskQueue }) => {
      const failure = await testClient.client.workflow
        .execute<typeof rebindWorkflow>('rebindWorkflow', {
          taskQueue,
          workflowId: 'rebind-typo:wf-5',
          args: [{ consumerId: 'wf-5', filter: { market: ['m1'] } as StreamFilter, requestedBy: 'schedule' }],
        })
        .then(
          () => null,
          (error: unknown) => error,
        );
      expect(failure).toBeInstanceOf(WorkflowFailedError);
      expect((failure as WorkflowFailedError).cause?.message).toMatch(
        /^invalid rebind request: filter: Unrecognized key: "market"/,
      );
    });
    await res.close(testClient);
  });
});
