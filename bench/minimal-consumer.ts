// The `minimal` anchor: the least a correct durable consumer of the stream does (docs/protocol.md §2–§5), to
// measure ours against on the same server, database and journal. One WebSocket; JSON.parse of each frame; the
// frame sequence and generation checked; each event's content hash (§4, the same canonical hash ours writes);
// one fenced statement per checkpoint (bench/lean-statement.ts); the ACK only once that statement has
// committed. Checkpoints commit one after another, in order, while later frames keep arriving. No Temporal, no
// quarantine, no outbox, no group commit, no reconnect: a failure rejects.
import type pg from 'pg';
import WebSocket from 'ws';
import { eventContentHash } from '../protocol/canonical.js';
import { emptyLeanColumns, leanCommit, type LeanColumns } from './lean-statement.js';

interface WireEvent {
  ordinal: number;
  eventId: string;
  kind: string;
  entityId: string;
  revision: number;
  data: { market?: unknown; price?: unknown; size?: unknown };
}

/** The fields of the server frames this consumer reads; JSON.parse gives them unchecked. */
interface Frame {
  v: number;
  type: string;
  frameSequence: number;
  connectionId?: string;
  generation?: number;
  position?: number;
  token?: string;
  cut?: { position: number };
  events?: WireEvent[];
}

export interface MinimalOutcome {
  events: number;
  checkpoints: number;
  /** each checkpoint's statement, ms */
  commitMs: number[];
  /** when (performance.now()) the first checkpoint committed, and its events */
  firstCommit: { at: number; events: number } | null;
}

/**
 * Replays the journal from the floor to `cut` into the lean tables of `pool` as `consumerId` (whose lean
 * checkpoint row exists at version 0), and resolves once the checkpoint at the cut has committed and been ACKed.
 */
export function consumeMinimal(options: {
  url: string;
  apiKey: string;
  pool: pg.Pool;
  consumerId: string;
  subscriptionId: string;
  cut: number;
}): Promise<MinimalOutcome> {
  const { pool, consumerId, cut } = options;
  const ws = new WebSocket(options.url);
  const outcome: MinimalOutcome = { events: 0, checkpoints: 0, commitMs: [], firstCommit: null };
  return new Promise<MinimalOutcome>((resolve, reject) => {
    const fail = (error: Error) => {
      ws.terminate();
      reject(error);
    };
    const send = (frame: object) => ws.send(JSON.stringify({ v: 1, ...frame }));
    let sequence = 0;
    let connectionId = '';
    let generation = 0;
    let version = 0;
    let staged = emptyLeanColumns();
    let effectAt = new Map<string, number>();
    let commits = Promise.resolve();
    const commit = async (position: number, token: string, columns: LeanColumns) => {
      const t = performance.now();
      version = await leanCommit(pool, consumerId, { position, token, version }, columns);
      outcome.commitMs.push(performance.now() - t);
      outcome.checkpoints += 1;
      outcome.events += columns.eventIds.length;
      outcome.firstCommit ??= { at: performance.now(), events: outcome.events };
      send({ type: 'ack', connectionId, generation, position, token });
      if (position >= cut) {
        ws.close();
        resolve(outcome);
      }
    };
    ws.on('error', fail);
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      if (isBinary) return fail(new Error('binary frame'));
      const frame = JSON.parse(data.toString('utf8')) as Frame;
      if (frame.v !== 1 || frame.frameSequence !== ++sequence) {
        return fail(new Error(`frame ${frame.frameSequence} out of sequence (expected ${sequence})`));
      }
      switch (frame.type) {
        case 'hello':
          connectionId = frame.connectionId!;
          return send({ type: 'authenticate', apiKey: options.apiKey });
        case 'authenticated':
          return send({
            type: 'subscribe',
            consumerId,
            subscriptionId: options.subscriptionId,
            filter: {},
            start: { mode: 'from_floor' },
          });
        case 'subscribed':
          generation = frame.generation!;
          if (frame.cut!.position !== cut) return fail(new Error(`cut ${frame.cut!.position}, expected ${cut}`));
          return;
        case 'batch': {
          if (frame.generation !== generation) return fail(new Error(`batch of generation ${frame.generation}`));
          const c = staged;
          for (const event of frame.events!) {
            c.eventIds.push(event.eventId);
            c.contentHashes.push(eventContentHash(event));
            c.positions.push(frame.position!);
            c.ordinals.push(event.ordinal);
            // One effect per entity and checkpoint: a later revision replaces an earlier one in place.
            const at = effectAt.get(event.entityId);
            if (at !== undefined && c.revisions[at]! >= event.revision) continue;
            const i = at ?? c.entityIds.length;
            effectAt.set(event.entityId, i);
            c.entityIds[i] = event.entityId;
            c.revisions[i] = event.revision;
            c.markets[i] = String(event.data.market);
            c.prices[i] = String(event.data.price);
            c.sizes[i] = String(event.data.size);
          }
          return;
        }
        case 'checkpoint': {
          if (frame.generation !== generation) return fail(new Error(`checkpoint of generation ${frame.generation}`));
          const columns = staged;
          staged = emptyLeanColumns();
          effectAt = new Map();
          const { position, token } = frame as Required<Pick<Frame, 'position' | 'token'>>;
          commits = commits.then(() => commit(position, token, columns)).catch(fail);
          return;
        }
        case 'caught_up':
        case 'quality':
          return;
        default:
          return fail(new Error(`stopped by a ${frame.type} frame: ${data.toString('utf8')}`));
      }
    });
  });
}
