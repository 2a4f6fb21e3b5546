// The reference server as a child process for the benches (so its CPU and memory are not the client's), and a
// raw client that captures the frames of one from_floor replay.
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import WebSocket from 'ws';
import { decodeServerFrame, encodeClientFrame, type ServerFrame } from '../protocol/codec.js';
import { DEFAULT_RUN_LENGTH } from '../simulator/journal.js';
import { ROOT } from './support.js';

export const SEED = 7;
export const API_KEY = 'bench-stream-key';
export const SUBSCRIPTION = 'bench-sub';
export const CAPTURE_CONSUMER = 'bench-capture';

export interface Simulator {
  url: string;
  process: ChildProcess;
}

/** `simulator/main.ts` with a seeded journal of `transitions`, checkpointing every `checkpointEvery` batches. */
export async function startSimulator(options: {
  transitions: number;
  checkpointEvery: number;
  liveRate?: number;
  /** Keep the whole journal generated once read (the benches that replay it several times). */
  keepJournal?: boolean;
  /** A journal written by Journal.save, served instead of one generated from the seed. */
  journalFile?: string;
}): Promise<Simulator> {
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      join(ROOT, 'simulator/main.ts'),
      '--port',
      '0',
      '--seed',
      String(SEED),
      '--transitions',
      String(options.transitions),
      '--api-key',
      API_KEY,
      '--checkpoint-every',
      String(options.checkpointEvery),
      '--token-secret',
      'bench-stream-secret',
      ...(options.liveRate ? ['--live-rate', String(options.liveRate)] : []),
      ...(options.journalFile ? ['--journal', options.journalFile] : []),
      ...(options.keepJournal
        ? ['--cached-runs', String(Math.ceil(options.transitions / DEFAULT_RUN_LENGTH) + 1)]
        : []),
    ],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const lines = createInterface({ input: child.stdout });
  const url = await new Promise<string>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`simulator exited with ${code} before listening`)));
    lines.on('line', (line) => {
      const match = /^ws\s+(\S+)/.exec(line);
      if (match) resolve(match[1]!);
    });
  });
  child.removeAllListeners('exit');
  return { url, process: child };
}

export async function stopSimulator(sim: Simulator): Promise<void> {
  if (sim.process.exitCode !== null) return;
  const exited = new Promise((resolve) => sim.process.once('exit', resolve));
  sim.process.kill('SIGTERM');
  await exited;
}

/** The journal head from a hello: the cut of a from_floor subscription when nothing is appended live. */
export async function probeHead(url: string): Promise<number> {
  const ws = new WebSocket(url);
  return new Promise((resolve, reject) => {
    ws.on('error', reject);
    ws.once('message', (data: Buffer) => {
      const { frame } = decodeServerFrame(data.toString('utf8'));
      ws.close();
      if (frame.type === 'hello') resolve(frame.history.head);
      else reject(new Error(`expected hello, got ${frame.type}`));
    });
  });
}

/** Every server frame of one from_floor replay up to the cut, as raw text, ACKing checkpoints like a client. */
export async function captureFrames(url: string, cut: number): Promise<string[]> {
  const frames: string[] = [];
  await replayFrames(url, cut, (text) => frames.push(text));
  return frames;
}

/**
 * One from_floor replay up to the cut by a raw client that ACKs like a consumer. The reference server
 * generates its journal as it is first read: a replay before the timed ones keeps that out of them.
 */
export function replayFrames(url: string, cut: number, onFrame: (text: string) => void = () => undefined) {
  const ws = new WebSocket(url);
  return new Promise<void>((resolve, reject) => {
    let connectionId = '';
    ws.on('error', reject);
    ws.on('message', (data: Buffer) => {
      const text = data.toString('utf8');
      onFrame(text);
      const frame = JSON.parse(text) as ServerFrame;
      const send = (body: Parameters<typeof encodeClientFrame>[0]) => ws.send(encodeClientFrame(body));
      switch (frame.type) {
        case 'hello':
          connectionId = frame.connectionId;
          return send({ type: 'authenticate', apiKey: API_KEY });
        case 'authenticated':
          return send({
            type: 'subscribe',
            consumerId: CAPTURE_CONSUMER,
            subscriptionId: SUBSCRIPTION,
            filter: {},
            start: { mode: 'from_floor' },
          });
        case 'subscribed':
          if (frame.cut.position !== cut) reject(new Error(`capture cut ${frame.cut.position} is not the head ${cut}`));
          return;
        case 'checkpoint':
          send({
            type: 'ack',
            connectionId,
            generation: frame.generation,
            position: frame.position,
            token: frame.token,
          });
          if (frame.position >= cut) {
            ws.close();
            resolve();
          }
          return;
        case 'error':
        case 'reset_required':
          return reject(new Error(`capture refused: ${text}`));
        default:
          return;
      }
    });
  });
}

/** A journal's shape up to the cut, from one untimed replay: its events, checkpoints, and events by checkpoint. */
export interface JournalCount {
  events: number;
  checkpoints: number;
  /** the events up to and including each checkpoint's position */
  eventsAt: Map<number, number>;
}

/** Counts the journal of `url` up to `cut` in one replay (which also makes the server generate it). */
export async function countJournal(url: string, cut: number): Promise<JournalCount> {
  const count: JournalCount = { events: 0, checkpoints: 0, eventsAt: new Map([[0, 0]]) };
  await replayFrames(url, cut, (text) => {
    if (text.includes('"type":"batch"')) count.events += (JSON.parse(text) as { events: unknown[] }).events.length;
    else if (text.includes('"type":"checkpoint"')) {
      count.checkpoints += 1;
      count.eventsAt.set((JSON.parse(text) as { position: number }).position, count.events);
    }
  });
  return count;
}
