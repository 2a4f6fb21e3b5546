// One round of the cpu bench, in a process of its own: the tree at BENCH_TARGET_ROOT decodes, stages and
// decides the captured frames in BENCH_FRAMES_FILE (a JSON array of message texts), one warm-up pass and then
// BENCH_CPU_PASSES timed ones; prints the median pass as one JSON line.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { decideCommit as DecideCommit, ExecutionState, ExistingRows } from '../domain/decide.js';
import type { decodeServerFrame as DecodeServerFrame, DecodedServerFrame, ServerFrame } from '../protocol/codec.js';
import type { Session as SessionClass } from '../protocol/session.js';
import { WHALE_ALERT_MIN_NOTIONAL } from './fixtures.js';
import { CAPTURE_CONSUMER, SUBSCRIPTION } from './simulator-process.js';
import { median, WORKER_STAGING } from './support.js';
import { whaleAlertRules } from '../protocol/types.js';

const PASSES = Number(process.env.BENCH_CPU_PASSES ?? 3);

interface Modules {
  decodeServerFrame: typeof DecodeServerFrame;
  Session: typeof SessionClass;
  decideCommit: typeof DecideCommit;
}

async function load(root: string): Promise<Modules> {
  const from = async <T>(relative: string) => (await import(pathToFileURL(join(root, relative)).href)) as T;
  const codec = await from<{ decodeServerFrame: typeof DecodeServerFrame }>('protocol/codec.ts');
  const session = await from<{ Session: typeof SessionClass }>('protocol/session.ts');
  const decide = await from<{ decideCommit: typeof DecideCommit }>('domain/decide.ts');
  return { decodeServerFrame: codec.decodeServerFrame, Session: session.Session, decideCommit: decide.decideCommit };
}

/** A baseline tree's decodeServerFrame may give the frame alone (before the codec gave the message's size too). */
function decoded(result: DecodedServerFrame | ServerFrame): Partial<DecodedServerFrame> & { frame: ServerFrame } {
  return 'frame' in result ? result : { frame: result };
}

/** µs per event of each stage, and the plans' outbox count (the same for both trees, or the bench is void). */
export interface Pass {
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
    actions: whaleAlertRules(WHALE_ALERT_MIN_NOTIONAL),
    staging: WORKER_STAGING,
    now: () => 0,
  });
  // Each plan sees the executions the previous ones wrote, as the database would give them back.
  const executions = new Map<string, ExecutionState>();
  const saved: ExistingRows = { receipts: new Map(), quarantine: new Map(), executions };
  let [decodeMs, stageMs, decideMs, alerts, version] = [0, 0, 0, 0, 0];
  for (const message of messages) {
    const t0 = performance.now();
    const { frame, bytes, plainText } = decoded(m.decodeServerFrame(message));
    const t1 = performance.now();
    const actions = session.receive(frame, bytes, plainText);
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

const frames = JSON.parse(readFileSync(process.env.BENCH_FRAMES_FILE!, 'utf8')) as string[];
// As the WebSocket hands them over: Buffers.
const messages = frames.map((text) => Buffer.from(text, 'utf8'));
const events = Number(process.env.BENCH_EVENTS);
const modules = await load(process.env.BENCH_TARGET_ROOT!);
pass(modules, messages, events);
const passes = Array.from({ length: PASSES }, () => pass(modules, messages, events));
const med = (pick: (p: Pass) => number) => median(passes.map(pick));
const result: Pass = {
  decodeUs: med((p) => p.decodeUs),
  stageUs: med((p) => p.stageUs),
  decideUs: med((p) => p.decideUs),
  totalUs: med((p) => p.totalUs),
  alerts: passes[0]!.alerts,
};
process.stdout.write(`${JSON.stringify(result)}\n`);
