import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { eventContentHash, filterHash } from '../../protocol/canonical.js';
import type { ServerFrame } from '../../protocol/codec.js';
import type { ProtocolViolation } from '../../protocol/session-fence.js';
import { StagingBoundExceeded } from '../../protocol/staging.js';
import type { Binding } from '../../protocol/types.js';
import { FILTER, drive, framesFor, resequence, scenarioArb, sessionOptions, type Scenario } from './stream-fixtures.js';

const matchedInJournalOrder = (s: Scenario) =>
  s.journal.flatMap((t) => t.events.map((e) => ({ position: t.position, ordinal: e.ordinal, eventId: e.eventId })));

const savedBinding = (overrides: Partial<Binding> = {}): Binding => ({
  consumerId: 'c1',
  subscriptionId: 's1',
  stream: 'polymarket',
  historyId: 'h1',
  filter: FILTER,
  filterHash: filterHash(FILTER),
  generation: 1,
  mappings: {},
  ...overrides,
});

const simple: Scenario = {
  journal: [
    {
      position: 2,
      sourceEventCount: 3,
      events: [
        {
          ordinal: 1,
          eventId: 'e1',
          kind: 'trade',
          entityId: 'x1',
          revision: 1,
          observedAt: '2026-01-02T00:00:00Z',
          data: { market: 'm', asset: 'a', side: 'BUY', price: '0.5', size: '10', wallet: 'w', txHash: '0x1' },
        },
        {
          ordinal: 3,
          eventId: 'e3',
          kind: 'trade',
          entityId: 'x2',
          revision: 1,
          observedAt: '2026-01-01T00:00:00Z',
          data: { market: 'm', asset: 'a', side: 'SELL', price: '0.4', size: '5', wallet: 'w', txHash: '0x2' },
        },
      ],
    },
    { position: 4, sourceEventCount: 1, events: [], quality: { position: 4, scope: 'polygon', state: 'degraded' } },
  ],
  checkpointAfter: [],
  cut: 5,
};

/** Index of the first frame of `type` in the stream. */
const indexOf = (frames: ServerFrame[], type: ServerFrame['type']) => frames.findIndex((f) => f.type === type);

function violationOf(frames: ServerFrame[], opts = sessionOptions()): ProtocolViolation | StagingBoundExceeded | Error {
  const { ended } = drive(frames, opts);
  if (ended?.type !== 'reconnect') throw new Error(`expected a reconnect, got ${JSON.stringify(ended)}`);
  return ended.error;
}

describe('Session: valid streams', () => {
  it('walks hello → authenticate → subscribe → streaming and asks for the key without holding it', () => {
    const frames = framesFor(simple);
    const { sent, plans, acks, ended, session } = drive(frames);
    expect(ended).toBeNull();
    expect(sent[0]).toEqual({ type: 'authenticate' });
    expect(sent[1]).toMatchObject({
      type: 'send',
      frame: {
        type: 'subscribe',
        consumerId: 'c1',
        subscriptionId: 's1',
        filter: FILTER,
        start: { mode: 'from_floor' },
      },
    });
    expect(plans).toHaveLength(1);
    expect(acks).toEqual([{ position: 5, token: 'tok-1', generation: 1 }]);
    expect(session.caughtUp).toBe(true);
    const plan = plans[0]!;
    expect(plan.events.map((e) => e.eventId)).toEqual(['e1', 'e3']);
    expect(plan.checkpoint).toEqual({ position: 5, token: 'tok-1', generation: 1, cutPosition: 5, cutReached: true });
    // the cut snapshot contributes its scope at lastPosition, then the streamed notice in journal order
    expect(plan.qualityNotices).toEqual([
      { position: 0, scope: 'polygon', state: 'ok' },
      { position: 4, scope: 'polygon', state: 'degraded' },
    ]);
    expect(plan.binding).toMatchObject({
      stream: 'polymarket',
      historyId: 'h1',
      generation: 1,
      filterHash: filterHash(FILTER),
      mappings: { a1: { market: 'm1', outcome: 'YES' } },
    });
  });

  it('accepts any valid frame stream and stages it in journal order, never observedAt order', () => {
    fc.assert(
      fc.property(scenarioArb, (scenario) => {
        const { plans, acks, ended, session } = drive(framesFor(scenario));
        expect(ended).toBeNull();
        expect(session.caughtUp).toBe(true);
        const staged = plans.flatMap((p) => p.events);
        expect(staged.map((e) => ({ position: e.position, ordinal: e.ordinal, eventId: e.eventId }))).toEqual(
          matchedInJournalOrder(scenario),
        );
        for (const e of staged) expect(e.contentHash).toBe(eventContentHash(e));
        // every checkpoint is committed once and ACKed once, in order; only the last reaches the cut
        expect(acks.map((a) => a.position)).toEqual(plans.map((p) => p.checkpoint.position));
        expect(plans.map((p) => p.checkpoint.cutReached)).toEqual(
          plans.map((p) => p.checkpoint.position >= scenario.cut),
        );
        expect(plans.map((p) => p.fence.version)).toEqual(plans.map((_, i) => i));
      }),
    );
  });

  it('rejects any duplicated, dropped, reordered or resequenced frame', () => {
    const mutation = fc.constantFrom('duplicate', 'drop', 'swap', 'resequence' as const);
    fc.assert(
      fc.property(
        scenarioArb,
        mutation,
        fc.nat(),
        fc.integer({ min: -3, max: 3 }).filter((d) => d !== 0),
        (scenario, kind, pick, delta) => {
          const frames = framesFor(scenario);
          // The last frame cannot be dropped detectably (nothing follows it); every other index can.
          const i = pick % (frames.length - 1);
          const mutated = [...frames];
          if (kind === 'duplicate') mutated.splice(i + 1, 0, frames[i]!);
          if (kind === 'drop') mutated.splice(i, 1);
          if (kind === 'swap') [mutated[i], mutated[i + 1]] = [frames[i + 1]!, frames[i]!];
          if (kind === 'resequence')
            mutated[i] = { ...frames[i]!, frameSequence: Math.max(1, frames[i]!.frameSequence + delta) };
          if (kind === 'resequence' && mutated[i]!.frameSequence === frames[i]!.frameSequence) return;
          const { ended, acks } = drive(mutated);
          expect(ended?.type).toBe('reconnect');
          // nothing after the faulty frame was ACKed
          expect(acks.length).toBeLessThanOrEqual(drive(frames.slice(0, i + 1)).acks.length);
        },
      ),
    );
  });

  it('rejects a duplicated, dropped or reordered batch even when the server renumbers the frames', () => {
    fc.assert(
      fc.property(
        scenarioArb.filter((s) => s.journal.some((t) => t.events.length > 0)),
        fc.constantFrom('duplicate', 'drop', 'swap' as const),
        fc.nat(),
        (scenario, kind, pick) => {
          const frames = framesFor(scenario);
          const batchIndices = frames.flatMap((f, i) => (f.type === 'batch' ? [i] : []));
          const i = batchIndices[pick % batchIndices.length]!;
          const mutated = [...frames];
          if (kind === 'duplicate') mutated.splice(i + 1, 0, frames[i]!);
          if (kind === 'drop') mutated.splice(i, 1);
          if (kind === 'swap') {
            if (i === 0 || frames[i - 1]!.type === 'subscribed') return;
            [mutated[i - 1], mutated[i]] = [frames[i]!, frames[i - 1]!];
          }
          const { ended } = drive(resequence(mutated));
          expect(ended?.type).toBe('reconnect');
        },
      ),
    );
  });

  it('holds the event-count and byte bounds: exceeding one drops the session, staying within commits', () => {
    fc.assert(
      fc.property(scenarioArb, fc.integer({ min: 0, max: 8 }), (scenario, maxEvents) => {
        const opts = sessionOptions({ staging: { maxEvents, maxBytes: 10_000_000, maxAgeMs: 60_000 } });
        const { plans, ended } = drive(framesFor(scenario), opts);
        // the largest number of events staged between two checkpoints
        let largest = 0;
        let running = 0;
        scenario.journal.forEach((t, i) => {
          running += t.events.length;
          largest = Math.max(largest, running);
          if (scenario.checkpointAfter.includes(i)) running = 0;
        });
        if (largest > maxEvents) {
          expect(ended?.type === 'reconnect' && ended.error).toBeInstanceOf(StagingBoundExceeded);
        } else {
          expect(ended).toBeNull();
        }
        for (const plan of plans) expect(plan.events.length).toBeLessThanOrEqual(maxEvents);
      }),
    );
    const bytes = violationOf(
      framesFor(simple),
      sessionOptions({ staging: { maxEvents: 100, maxBytes: 100, maxAgeMs: 60_000 } }),
    );
    expect(bytes).toMatchObject({ code: 'staging_bound_exceeded', bound: 'bytes', limit: 100 });
  });

  it('drops the session when staged data is older than maxAgeMs (injected clock)', () => {
    let now = 0;
    const opts = sessionOptions({ now: () => now, staging: { maxEvents: 100, maxBytes: 1_000_000, maxAgeMs: 1_000 } });
    const frames = framesFor(simple);
    const { session } = drive(frames.slice(0, indexOf(frames, 'batch') + 1), opts);
    now = 1_000;
    expect(session.tick()).toEqual([]);
    now = 1_001;
    const [action] = session.tick();
    expect(action).toMatchObject({ type: 'reconnect', error: { code: 'staging_bound_exceeded', bound: 'age' } });
    // a dropped session ignores everything that follows and never ACKs
    expect(session.receive(frames[indexOf(frames, 'checkpoint')]!)).toEqual([]);
  });

  it('commits and ACKs a zero-match checkpoint', () => {
    const { plans, acks, ended } = drive(framesFor({ journal: [], checkpointAfter: [], cut: 5 }));
    expect(ended).toBeNull();
    expect(plans).toHaveLength(1);
    expect(plans[0]!.events).toEqual([]);
    expect(acks).toEqual([{ position: 5, token: 'tok-1', generation: 1 }]);
  });

  it('stages unsupported kinds for quarantine instead of rejecting them', () => {
    const scenario: Scenario = {
      journal: [
        {
          position: 1,
          sourceEventCount: 1,
          events: [
            {
              ordinal: 1,
              eventId: 'u1',
              kind: 'mystery',
              entityId: 'x',
              revision: 1,
              observedAt: 'n/a',
              data: { any: 1 },
            },
          ],
        },
      ],
      checkpointAfter: [],
      cut: 1,
    };
    const { plans, ended } = drive(framesFor(scenario));
    expect(ended).toBeNull();
    expect(plans[0]!.events.map((e) => e.kind)).toEqual(['mystery']);
  });
});

describe('Session: each check names the frame type and field', () => {
  const frames = framesFor(simple);
  const at = (type: ServerFrame['type']) => indexOf(frames, type);
  const patch = (index: number, change: Record<string, unknown>): ServerFrame[] =>
    frames.map((f, i) => (i === index ? { ...f, ...change } : f));
  const batch = frames[at('batch')] as Extract<ServerFrame, { type: 'batch' }>;

  const cases: [string, ServerFrame[], string, string, RegExp?][] = [
    ['protocol name', patch(0, { protocol: 'other/2' }), 'hello', 'protocol'],
    ['hello not first', resequence(frames.slice(1)), 'authenticated', 'type'],
    ['subscribed consumerId', patch(at('subscribed'), { consumerId: 'other' }), 'subscribed', 'consumerId'],
    ['subscribed subscriptionId', patch(at('subscribed'), { subscriptionId: 'other' }), 'subscribed', 'subscriptionId'],
    [
      'subscribed filterHash',
      patch(at('subscribed'), { filterHash: filterHash({ kinds: ['trade'] }) }),
      'subscribed',
      'filterHash',
    ],
    ['cut below start', patch(at('subscribed'), { startPosition: 9 }), 'subscribed', 'cut.position'],
    [
      'snapshot not at the cut',
      patch(at('subscribed'), { sourceQuality: { asOf: 3, scopes: [] } }),
      'subscribed',
      'sourceQuality.asOf',
    ],
    ['batch generation', patch(at('batch'), { generation: 2 }), 'batch', 'generation'],
    ['batch position not above start', patch(at('subscribed'), { startPosition: 2 }), 'batch', 'position'],
    ['events vs matchedEventCount', patch(at('batch'), { matchedEventCount: 3 }), 'batch', 'matchedEventCount'],
    [
      'matched above source count',
      patch(at('batch'), { sourceEventCount: 1, matchedEventCount: 2 }),
      'batch',
      'matchedEventCount',
    ],
    ['ordinal order', patch(at('batch'), { events: [...batch.events].reverse() }), 'batch', 'events.1.ordinal'],
    ['ordinal above source count', patch(at('batch'), { sourceEventCount: 2 }), 'batch', 'events.1.ordinal'],
    [
      'malformed trade data',
      patch(at('batch'), {
        events: [{ ...batch.events[0]!, data: { ...batch.events[0]!.data, price: '1.5' } }, batch.events[1]!],
      }),
      'batch',
      'events.data.price',
    ],
    ['quality generation', patch(at('quality'), { generation: 3 }), 'quality', 'generation'],
    ['quality behind the journal', patch(at('quality'), { position: 1 }), 'quality', 'position'],
    ['checkpoint generation', patch(at('checkpoint'), { generation: 2 }), 'checkpoint', 'generation'],
    ['checkpoint behind staged', patch(at('checkpoint'), { position: 3 }), 'checkpoint', 'position'],
    ['checkpoint batchCount', patch(at('checkpoint'), { batchCount: 2 }), 'checkpoint', 'batchCount'],
    ['caught_up cut', patch(at('caught_up'), { cut: { position: 6 } }), 'caught_up', 'cut.position'],
    ['caught_up generation', patch(at('caught_up'), { generation: 2 }), 'caught_up', 'generation'],
    ['batch before subscribed', resequence([frames[0]!, frames[1]!, batch]), 'batch', 'type'],
    ['frameSequence gap', patch(2, { frameSequence: 4 }), 'subscribed', 'frameSequence', /gap: expected 3, got 4/],
    ['frameSequence repeat', patch(2, { frameSequence: 2 }), 'subscribed', 'frameSequence', /repeat/],
  ];

  it.each(cases)('%s', (_name, mutated, frameType, field, message) => {
    const error = violationOf(mutated) as ProtocolViolation;
    expect({ frameType: error.frameType, field: error.field }).toEqual({ frameType, field });
    expect(error.message).toContain(`${frameType} frame`);
    if (message) expect(error.message).toMatch(message);
  });

  it('a checkpoint that arrives before the cut is reached does not satisfy caught_up', () => {
    const early = resequence([
      ...frames.slice(0, at('checkpoint')),
      { ...frames[at('checkpoint')]!, position: 4 } as ServerFrame,
      frames[at('caught_up')]!,
    ]);
    expect(violationOf(early)).toMatchObject({ frameType: 'caught_up', field: 'cut.position' });
  });
});

describe('Session: resume and rebind checks', () => {
  const resumeOpts = sessionOptions({
    start: { mode: 'resume', token: 'tok-saved' },
    saved: savedBinding(),
    committedPosition: 3,
    fence: { leaseEpoch: 2, version: 7 },
  });
  const resumeFrames = framesFor({ journal: [], checkpointAfter: [], cut: 2 }, { startPosition: 3 });

  it('resumes from the committed position with the saved generation and fences with the loaded version', () => {
    const { plans, ended } = drive(resumeFrames, resumeOpts);
    expect(ended).toBeNull();
    expect(plans[0]!.fence).toEqual({ leaseEpoch: 2, version: 7 });
    expect(plans[0]!.startMode).toBe('resume');
  });

  it('requires startPosition to equal the committed position', () => {
    expect(
      violationOf(framesFor({ journal: [], checkpointAfter: [], cut: 2 }, { startPosition: 2 }), resumeOpts),
    ).toMatchObject({ frameType: 'subscribed', field: 'startPosition' });
  });

  it('requires the saved generation on resume and saved + 1 on rebind', () => {
    expect(
      violationOf(
        framesFor({ journal: [], checkpointAfter: [], cut: 2 }, { startPosition: 3, generation: 2 }),
        resumeOpts,
      ),
    ).toMatchObject({ frameType: 'subscribed', field: 'generation' });
    const rebindFilter = { kinds: ['trade'] };
    const rebind = sessionOptions({
      ...resumeOpts,
      start: { mode: 'rebind', token: 'tok-saved' },
      filter: rebindFilter,
    });
    const g2 = framesFor(
      { journal: [], checkpointAfter: [], cut: 2 },
      { startPosition: 3, generation: 2, filter: rebindFilter },
    );
    expect(drive(g2, rebind).ended).toBeNull();
    expect(drive(g2, rebind).plans[0]!.binding).toMatchObject({ generation: 2, filter: rebindFilter });
    const g1 = framesFor(
      { journal: [], checkpointAfter: [], cut: 2 },
      { startPosition: 3, generation: 1, filter: rebindFilter },
    );
    expect(violationOf(g1, rebind)).toMatchObject({ frameType: 'subscribed', field: 'generation' });
  });

  it('treats a different history id as reset_required history_rebuilt, keeping the saved token', () => {
    const rebuilt = framesFor({ journal: [], checkpointAfter: [], cut: 2 }, { startPosition: 3, historyId: 'h2' });
    const { ended, sent } = drive(rebuilt, resumeOpts);
    expect(ended).toEqual({
      type: 'stop',
      stop: {
        kind: 'reset_required',
        reason: 'history_rebuilt',
        history: { id: 'h2', floor: 0, head: 5 },
        refusedToken: 'tok-saved',
        detectedLocally: true,
      },
    });
    expect(sent).toEqual([]); // not even authenticated
  });
});

describe('Session: server stops', () => {
  const hello = framesFor(simple).slice(0, 2);
  const stopAfterAuth = (frame: Record<string, unknown>) => drive(resequence([...hello, frame as ServerFrame])).ended;

  it('reset_required stops with the refused token and never asks for live_cut', () => {
    const history = { id: 'h1', floor: 10, head: 20 };
    expect(
      stopAfterAuth({
        v: 1,
        type: 'reset_required',
        frameSequence: 0,
        reason: 'cursor_expired',
        token: 'tok-old',
        history,
      }),
    ).toEqual({
      type: 'stop',
      stop: {
        kind: 'reset_required',
        reason: 'cursor_expired',
        history,
        refusedToken: 'tok-old',
        detectedLocally: false,
      },
    });
  });

  it.each([
    ['overloaded', { kind: 'retry_later', code: 'overloaded', retryAfterMs: 250 }],
    ['slow_consumer', { kind: 'retry_later', code: 'slow_consumer', retryAfterMs: 250 }],
    ['cursor_mismatch', { kind: 'cursor_mismatch' }],
    ['unauthorized', { kind: 'failed', code: 'unauthorized' }],
    ['protocol_violation', { kind: 'failed', code: 'protocol_violation' }],
  ])('error %s', (code, stop) => {
    expect(
      stopAfterAuth({ v: 1, type: 'error', frameSequence: 0, code, retryable: false, retryAfterMs: 250, message: 'm' }),
    ).toMatchObject({ type: 'stop', stop });
  });

  it('stale_generation drops the session to start clean', () => {
    expect(
      stopAfterAuth({
        v: 1,
        type: 'error',
        frameSequence: 0,
        code: 'stale_generation',
        retryable: false,
        message: 'ack for generation 1',
      }),
    ).toMatchObject({
      type: 'reconnect',
      error: { code: 'stale_generation' },
    });
  });
});
