// A fault that recurs on every session escalates instead of looping (docs/protocol.md §6): against a reference server
// that breaks the contract the same way on every connection, the consumer opens a bounded number of sessions,
// stops in `paused` with the fault named (frame type, field, what was expected) and the resume command shown,
// keeps everything committed without bumping the version, and reaches the head once the fault is gone and an
// operator resumes.
import { describe, expect, it } from 'vitest';
import type { FaultPlan } from '../../simulator/server.js';
import { consumerSummary } from '../../db/index.js';
import { phaseSearchAttribute, resumeSignal } from '../../workflows/definitions.js';
import { resumeCommand } from '../../workflows/commands.js';
import { useTestDatabase } from '../support/db.js';
import { useResources } from '../support/leaks.js';
import {
  journalOf,
  savedCheckpoint,
  trade,
  waitForPhase,
  waitForStatus,
  withConsumerStack,
  within,
} from './consumer-harness.js';
import { expectReplayable } from './replay-check.js';

const db = useTestDatabase();

/** Runs without progress before the stop, and reconnects inside one run: sessions stay below their product. */
const MAX_FAULTS = 3;
const RECONNECT_MAX_ATTEMPTS = 2;
const SESSION_BOUND = MAX_FAULTS * (RECONNECT_MAX_ATTEMPTS + 1);

const FAULTS: { name: string; fault: FaultPlan; names: RegExp }[] = [
  {
    name: 'a malformed caught_up',
    fault: { malformedCaughtUp: true },
    names: /protocol_violation.*invalid_frame in caught_up frame at cut: .*expected object/,
  },
  {
    name: 'a sequence gap at the same frame',
    fault: { frameSequence: { mode: 'skip', atFrame: 4, everySession: true } },
    names: /protocol_violation.*frame_sequence.* frame at frameSequence: gap: expected 4, got 5/,
  },
  {
    name: 'an overloaded that never clears',
    fault: { overloadEverySubscribe: { retryAfterMs: 100 } },
    names: /StreamTransportError: overloaded: server: overloaded/,
  },
];

/** The consumer's saved state and effects; the lease epoch moves with every run and is left out. */
async function committedEffects(consumerId: string) {
  const summary = await consumerSummary(db.pool, consumerId);
  return summary && { ...summary, state: { ...summary.state, leaseEpoch: null } };
}

describe('a fault that recurs on every session', () => {
  const res = useResources();

  it.each(FAULTS.map((f, i) => ({ ...f, index: i })))(
    '$name: bounded sessions, a stop that names it, committed state kept; resume after the fix reaches the head',
    async ({ fault, names, index }) => {
      const consumerId = `recurring-${index}`;
      const journal = journalOf(
        [1, 2, 3, 4, 5, 6].map((i) => ({ events: [trade(`r${index}-${i}`, 'mA', '0.5', '2')] })),
      );
      await withConsumerStack(
        res,
        db,
        { journal, env: { RECONNECT_MAX_ATTEMPTS: String(RECONNECT_MAX_ATTEMPTS) } },
        async ({ server, startConsumer }) => {
          const handle = await startConsumer({
            consumerId,
            leaseMs: 1_500,
            tuning: { maxFaultsWithoutProgress: MAX_FAULTS, backoffInitialMs: 200, backoffMaxMs: 400 },
          });
          await within(
            server.waitForAck((a) => a.consumerId === consumerId && a.position === journal.head),
            60_000,
            'the ACK of the head',
          );
          const before = await savedCheckpoint(db.pool, consumerId);
          const effectsBefore = await committedEffects(consumerId);
          const connectionsBefore = server.connections.length;
          Object.assign(server.faults, fault);

          const stopped = await waitForPhase(handle, 'paused', 120_000);
          const sessions = server.connections.length - connectionsBefore;
          // The lease running when the fault was armed may open one more clean session before it returns.
          expect(sessions).toBeGreaterThanOrEqual(MAX_FAULTS);
          expect(sessions).toBeLessThanOrEqual(SESSION_BOUND + 1);
          expect(stopped.stop?.reason).toMatch(
            new RegExp(
              `^${MAX_FAULTS} streaming runs in a row failed without forward progress \\(committed position ${journal.head}\\)`,
            ),
          );
          expect(stopped.stop?.reason).toMatch(names);
          expect(stopped.stop?.resolveWith).toBe(resumeCommand(consumerId));
          expect(stopped.faultsWithoutProgress).toBe(MAX_FAULTS);
          expect((await handle.describe()).typedSearchAttributes.get(phaseSearchAttribute)).toBe('paused');
          // Stopped means stopped: no session opens while paused.
          const connectionsAtStop = server.connections.length;
          // Nothing committed is lost and the unchanged checkpoint was never written again.
          expect(await savedCheckpoint(db.pool, consumerId)).toEqual(before);
          expect(await committedEffects(consumerId)).toEqual(effectsBefore);

          // The fault is removed, new transitions arrive, and the operator resumes: the consumer reaches the head.
          for (const key of Object.keys(fault)) server.faults[key as keyof FaultPlan] = undefined;
          journal.append({ events: [trade(`r${index}-7`, 'mA', '0.5', '2')] });
          journal.append({ events: [trade(`r${index}-8`, 'mA', '0.5', '2')] });
          expect(server.connections.length).toBe(connectionsAtStop);
          await handle.signal(resumeSignal, { actor: 'e2e', reason: 'fault removed' });
          const resumed = await waitForStatus(
            handle,
            'the head after the resume',
            (s) => s.committed?.position === journal.head,
            60_000,
          );
          expect(resumed.phase).toBe('streaming');
          expect(resumed.stop).toBeNull();
          expect(resumed.faultsWithoutProgress).toBe(0);
          expect((await consumerSummary(db.pool, consumerId))?.executions).toBe(8);
        },
      );
    },
  );

  it('replays every recorded history without nondeterminism and no history holds the API key', async () => {
    await expectReplayable();
  });
});
