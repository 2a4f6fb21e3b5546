import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { FrameSequence, ProtocolViolation, SessionFence } from '../../protocol/session-fence.js';
import { Session, type SessionAction } from '../../protocol/session.js';
import { framesFor, sessionOptions } from './stream-fixtures.js';

describe('FrameSequence', () => {
  const frame = (type: string, frameSequence: number) => ({ type, frameSequence });

  it('accepts 1 on hello and +1 for every frame, control frames included', () => {
    const seq = new FrameSequence();
    ['hello', 'authenticated', 'subscribed', 'caught_up', 'error'].forEach((type, i) => seq.accept(frame(type, i + 1)));
    // All five counted: the next frame must carry 6.
    expect(() => seq.accept(frame('batch', 5))).toThrow(/repeat: expected 6, got 5/);
    expect(() => seq.accept(frame('batch', 6))).not.toThrow();
  });

  it.each([
    ['gap', [1, 3], /gap: expected 2, got 3/],
    ['repeat', [1, 2, 2], /repeat: expected 3, got 2/],
    ['regression', [1, 2, 3, 1], /regression: expected 4, got 1/],
    ['not starting at 1', [2], /gap: expected 1, got 2/],
  ])('rejects a %s', (_name, sequence, message) => {
    const types = ['hello', 'batch', 'batch', 'batch'];
    const run = () => {
      const seq = new FrameSequence();
      sequence.forEach((n, i) => seq.accept(frame(types[i]!, n)));
    };
    expect(run).toThrow(ProtocolViolation);
    expect(run).toThrow(message);
  });

  it('requires hello first and only first', () => {
    expect(() => new FrameSequence().accept(frame('batch', 1))).toThrow(/first frame of a connection must be hello/);
    const seq = new FrameSequence();
    seq.accept(frame('hello', 1));
    expect(() => seq.accept(frame('hello', 2))).toThrow(/hello may only be the first frame/);
  });
});

describe('SessionFence', () => {
  it('only the newest, not yet retired epoch is active', () => {
    const fence = new SessionFence();
    const first = fence.begin();
    expect(fence.isActive(first)).toBe(true);
    const second = fence.begin();
    expect([fence.isActive(first), fence.isActive(second)]).toEqual([false, true]);
    fence.retire(first); // retiring an old epoch leaves the new one alone
    expect(fence.isActive(second)).toBe(true);
    fence.retire(second);
    expect(fence.isActive(second)).toBe(false);
  });

  it("an old epoch's callback changes nothing and produces no ACK", () => {
    // Each connection runs the same stream; commit callbacks of any connection run at random moments.
    const frames = framesFor({ journal: [], checkpointAfter: [], cut: 3 }).slice(0, -1);
    const op = fc.oneof(
      fc.constant({ op: 'connect' as const }),
      fc.constant({ op: 'close' as const }),
      fc.nat({ max: 5 }).map((age) => ({ op: 'callback' as const, age })),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 30 }), (ops) => {
        const fence = new SessionFence();
        const state = { position: 0 as number, acks: 0 };
        const connections: { epoch: number; closed: boolean; commit: () => SessionAction[] }[] = [];
        for (const step of ops) {
          if (step.op === 'connect') {
            const epoch = fence.begin();
            // a session that reached its checkpoint; the commit's completion callback runs later
            const session = new Session(sessionOptions());
            const plan = frames.flatMap((f) => session.receive(f)).find((a) => a.type === 'commit')!.plan;
            connections.push({
              epoch,
              closed: false,
              commit: () => {
                state.position = plan.checkpoint.position + connections.length;
                return session.committed(plan, { version: 1 });
              },
            });
          } else if (step.op === 'close') {
            const last = connections.at(-1);
            if (last) {
              fence.retire(last.epoch);
              last.closed = true;
            }
          } else {
            const target = connections.at(-1 - step.age);
            if (!target) continue;
            const before = { ...state };
            // The activity's guard: a callback runs only while its epoch is the active one.
            const acks = fence.isActive(target.epoch) ? target.commit() : undefined;
            // Active means the newest connection, not closed since.
            const active = target === connections.at(-1) && !target.closed;
            if (active) {
              expect(acks?.filter((a) => a.type === 'send' && a.frame.type === 'ack')).toHaveLength(1);
              state.acks += 1;
            } else {
              expect(acks).toBeUndefined();
              expect(state).toEqual(before);
            }
          }
        }
      }),
    );
  });
});
