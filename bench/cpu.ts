// Client CPU per event, without a database or a socket: the frames of one seeded from_floor replay, captured
// once from the reference server, go through decodeServerFrame, Session.receive (validation, staging, content
// hashes, plans) and decideCommit (over the executions earlier plans wrote, with a whale-alert threshold) of
// each measured tree.
// With a baseline the two trees' modules are loaded into this one process and measured in alternating rounds,
// so both see the same machine. Garbage collection stays inside the timed passes: it is part of the cost.
// Writes bench/results/cpu.json and cpu.md.
import type { decideCommit as DecideCommit, ExecutionState, ExistingRows } from '../domain/decide.js';
import type { decodeServerFrame as DecodeServerFrame } from '../protocol/codec.js';
import type { Session as SessionClass } from '../protocol/session.js';
import {
  CAPTURE_CONSUMER,
  captureFrames,
  probeHead,
  SEED,
  startSimulator,
  stopSimulator,
  SUBSCRIPTION,
} from './simulator-process.js';
import {
  describeMachine,
  importFrom,
  interleaved,
  machineState,
  median,
  round,
  table,
  writeResults,
  type BenchContext,
  type Target,
} from './support.js';

const TRANSITIONS = Number(process.env.BENCH_TRANSITIONS ?? 20_000);
const CHECKPOINT_EVERY = 100;
const ROUNDS = Number(process.env.BENCH_CPU_ROUNDS ?? 7);
const WHALE_ALERT_MIN_NOTIONAL = '450';
/** The worker's defaults (worker/config.ts): staging as a deployed consumer stages. */
const STAGING = { maxEvents: 10_000, maxBytes: 16 * 1024 * 1024, maxAgeMs: 60_000 };

interface Modules {
  decodeServerFrame: typeof DecodeServerFrame;
  Session: typeof SessionClass;
  decideCommit: typeof DecideCommit;
}

async function load(target: Target): Promise<Modules> {
  const codec = await importFrom<{ decodeServerFrame: typeof DecodeServerFrame }>(target, 'protocol/codec.ts');
  const session = await importFrom<{ Session: typeof SessionClass }>(target, 'protocol/session.ts');
  const decide = await importFrom<{ decideCommit: typeof DecideCommit }>(target, 'domain/decide.ts');
  return { decodeServerFrame: codec.decodeServerFrame, Session: session.Session, decideCommit: decide.decideCommit };
}

/** µs per event of each stage, and the plans' outbox count (the same for both trees, or the bench is void). */
interface Pass {
  decodeUs: number;
  stageUs: number;
  decideUs: number;
  totalUs: number;
  alerts: number;
}

/** One frame at a time, as the streaming activity does: decode, Session.receive, decideCommit of each plan. */
function pass(m: Modules, messages: Buffer[], events: number): Pass {
  const session = new m.Session({
    consumerId: CAPTURE_CONSUMER,
    subscriptionId: SUBSCRIPTION,
    filter: {},
    start: { mode: 'from_floor' },
    saved: null,
    committedPosition: null,
    fence: { leaseEpoch: 1, version: 0 },
    quarantinePolicy: { terminalReasons: ['unsupported_kind', 'unknown_correction_target'] },
    actions: { whaleAlertMinNotional: WHALE_ALERT_MIN_NOTIONAL },
    staging: STAGING,
    now: () => 0,
  });
  // Each plan sees the executions the previous ones wrote, as the database would give them back.
  const executions = new Map<string, ExecutionState>();
  const saved: ExistingRows = { receipts: new Map(), quarantine: new Map(), executions };
  let [decodeMs, stageMs, decideMs, alerts, version] = [0, 0, 0, 0, 0];
  for (const message of messages) {
    const t0 = performance.now();
    const frame = m.decodeServerFrame(message);
    const t1 = performance.now();
    const actions = session.receive(frame);
    const t2 = performance.now();
    decodeMs += t1 - t0;
    stageMs += t2 - t1;
    for (const action of actions) {
      if (action.type === 'reconnect' || action.type === 'stop')
        throw new Error(`offline replay stopped: ${JSON.stringify(action)}`);
      if (action.type !== 'commit') continue;
      const t3 = performance.now();
      const decision = m.decideCommit(action.plan, saved);
      decideMs += performance.now() - t3;
      if (decision.kind !== 'committed') throw new Error(`decideCommit: ${decision.kind}`);
      for (const execution of decision.writes.executions) executions.set(execution.entityId, execution);
      alerts += decision.writes.outbox.length;
      session.committed(action.plan, { version: ++version });
    }
  }
  const us = (ms: number) => (ms * 1000) / events;
  return {
    decodeUs: us(decodeMs),
    stageUs: us(stageMs),
    decideUs: us(decideMs),
    totalUs: us(decodeMs + stageMs + decideMs),
    alerts,
  };
}

export interface CpuRow {
  target: Target['label'];
  commit: string;
  decodeUs: number;
  stageUs: number;
  decideUs: number;
  totalUs: number;
  rounds: number;
}

export async function runCpuBench(ctx: BenchContext): Promise<void> {
  const start = machineState();
  const sim = await startSimulator({ transitions: TRANSITIONS, checkpointEvery: CHECKPOINT_EVERY });
  let frames: string[];
  try {
    frames = await captureFrames(sim.url, await probeHead(sim.url));
  } finally {
    await stopSimulator(sim);
  }
  // As the WebSocket hands them over: Buffers.
  const messages = frames.map((text) => Buffer.from(text, 'utf8'));
  const events = frames.reduce(
    (n, text) => n + (text.includes('"type":"batch"') ? (JSON.parse(text) as { events: unknown[] }).events.length : 0),
    0,
  );
  const targets = ctx.before ? [ctx.after, ctx.before] : [ctx.after];
  const modules = new Map<Target, Modules>();
  for (const target of targets) modules.set(target, await load(target));

  const passes = new Map<Target, Pass[]>(targets.map((t) => [t, []]));
  // One warm-up pass each, then alternating rounds.
  for (const target of targets) pass(modules.get(target)!, messages, events);
  for (let r = 0; r < ROUNDS; r++) {
    for (const target of interleaved(ctx, r)) passes.get(target)!.push(pass(modules.get(target)!, messages, events));
  }
  const alertCounts = new Set(targets.map((t) => passes.get(t)![0]!.alerts));
  if (alertCounts.size !== 1)
    throw new Error(`the trees disagree on the whale alerts: ${[...alertCounts].join(' vs ')}`);

  const rows: CpuRow[] = targets.map((target) => {
    const p = passes.get(target)!;
    const med = (pick: (x: Pass) => number) => round(median(p.map(pick)), 2);
    return {
      target: target.label,
      commit: target.commit,
      decodeUs: med((x) => x.decodeUs),
      stageUs: med((x) => x.stageUs),
      decideUs: med((x) => x.decideUs),
      totalUs: med((x) => x.totalUs),
      rounds: p.length,
    };
  });
  const end = machineState();
  const meta = { bench: 'cpu', seed: SEED, transitions: TRANSITIONS, frames: frames.length, events, start, end };
  writeResults('cpu', { ...meta, alerts: [...alertCounts][0], rows }, [
    `# client CPU per event (${end.at})`,
    '',
    `${events} events in ${frames.length} captured frames (seed ${SEED}, ${TRANSITIONS} transitions, a checkpoint every`,
    `${CHECKPOINT_EVERY} batches, the worker's default staging limits) through decodeServerFrame, Session.receive and`,
    `decideCommit (each plan over the executions the previous ones wrote, quarantine terminal, whale alerts at ${WHALE_ALERT_MIN_NOTIONAL}: ${[...alertCounts][0]} alerts). Median of ${ROUNDS}`,
    'rounds, trees alternating within each round, in one process; frames are fed one at a time, as the streaming',
    'activity feeds them, and garbage collection is inside the timed passes.',
    describeMachine(start, end),
    '',
    ...table(
      ['tree', 'commit', 'decode µs/event', 'session+staging µs/event', 'decide µs/event', 'total µs/event'],
      rows.map((r) => [r.target, r.commit, r.decodeUs, r.stageUs, r.decideUs, r.totalUs]),
    ),
    '',
  ]);
}
