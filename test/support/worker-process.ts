// A worker process as operators run it (`npm run worker`: the compiled dist/worker/main.js, which `npm test` builds
// first): its stdout JSON log lines and stderr kept for assertions, its exit awaitable. The kill -9, takeover,
// scale-out, metrics and fault tests start several.
import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { WORKER_NODE_FLAGS } from '../../worker/node-flags.js';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

export interface WorkerProcess {
  child: ChildProcess;
  /** Every stdout line (JSON logs). */
  lines: string[];
  stderr: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** `env` is added to `baseEnv` (this process's environment unless a test needs a clean one). */
export function spawnWorker(env: Record<string, string>, baseEnv: NodeJS.ProcessEnv = process.env): WorkerProcess {
  const child = spawn(process.execPath, [...WORKER_NODE_FLAGS, join(repoRoot, 'dist/worker/main.js')], {
    cwd: repoRoot,
    env: { ...baseEnv, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  const stderr: string[] = [];
  createInterface({ input: child.stdout }).on('line', (line) => lines.push(line));
  createInterface({ input: child.stderr }).on('line', (line) => stderr.push(line));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolveExit) =>
    child.once('exit', (code, signal) => resolveExit({ code, signal })),
  );
  return { child, lines, stderr, exited };
}

export function isJsonObject(line: string): boolean {
  try {
    const value: unknown = JSON.parse(line);
    return typeof value === 'object' && value !== null;
  } catch {
    return false;
  }
}

/** The parsed log lines whose `msg` is `msg`. */
export function logLinesWith(worker: WorkerProcess, msg: string): Record<string, unknown>[] {
  return worker.lines.flatMap((line) => {
    try {
      const value = JSON.parse(line) as Record<string, unknown>;
      return value.msg === msg ? [value] : [];
    } catch {
      return [];
    }
  });
}

export function nonJsonLines(worker: WorkerProcess): string[] {
  return worker.lines.filter((line) => !isJsonObject(line));
}
