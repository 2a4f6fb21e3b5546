// The reference server in a process of its own, as users and the benches run it: what only shows when the server
// does not share its event loop with the client (in one process the client's reads pace the server's writes).
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';

const API_KEY = 'own-process-key';

let server: ChildProcess | null = null;

afterEach(async () => {
  if (server && server.exitCode === null && server.signalCode === null) {
    const exited = once(server, 'exit');
    server.kill('SIGTERM');
    await exited;
  }
  server = null;
});

/** simulator/main.ts on a free port with `args`; resolves with its WebSocket URL once it listens. */
async function startServer(args: string[]): Promise<string> {
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      fileURLToPath(new URL('../../simulator/main.ts', import.meta.url)),
      '--port',
      '0',
      '--api-key',
      API_KEY,
      '--token-secret',
      'own-process-secret',
      ...args,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  server = child;
  return new Promise<string>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`the simulator exited with ${code} before listening`)));
    createInterface({ input: child.stdout }).on('line', (line) => {
      const match = /^ws\s+(\S+)/.exec(line);
      if (match) resolve(match[1]!);
    });
  });
}

describe('the reference server in its own process', () => {
  it('reads the client while it streams: a close is answered long before the window of 64 checkpoints fills', async () => {
    // 64 unacknowledged checkpoints of 500 transitions: a server that read nothing until the window filled (its
    // writes, taken by the kernel at once, completing tick after tick) streamed all 64 before it saw the close,
    // and a consumer ending a session waited out its close timeout. A raw client keeps up with the writes.
    const url = await startServer(['--seed', '7', '--transitions', '32500', '--checkpoint-every', '500']);
    const ws = new WebSocket(url);
    const send = (frame: object) => ws.send(JSON.stringify({ v: 1, ...frame }));
    const closed = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
    let checkpoints = 0;
    ws.on('message', (data: Buffer) => {
      const frame = JSON.parse(data.toString()) as { type: string };
      if (frame.type === 'hello') send({ type: 'authenticate', apiKey: API_KEY });
      if (frame.type === 'authenticated')
        send({ type: 'subscribe', consumerId: 'c', subscriptionId: 's', filter: {}, start: { mode: 'from_floor' } });
      if (frame.type !== 'checkpoint') return;
      checkpoints += 1;
      if (checkpoints === 1) ws.close(1000, 'done');
    });
    expect(await closed).toBe(1000);
    expect(checkpoints).toBeLessThan(32);
  });
});
