// A leak check for tests. Register everything a test opens; whatever is still open when the test ends is
// closed for it and the test FAILS, naming the leaked resources.
//
//   const res = useResources();                    // once per file or describe block
//   const pool = res.track(new pg.Pool(...));      // known shapes close themselves (see closerFor)
//   const server = res.track(http.createServer(), (s) => closeServer(s), 'simulator');
//   ...
//   await res.close(pool);                         // the test closes what it opened: no leak
//
// `useResources({ scope: 'file' })` checks in afterAll instead, for resources opened in beforeAll.
import type { ChildProcess } from 'node:child_process';
import type { Server } from 'node:net';
import { afterAll, afterEach } from 'vitest';

type Close<T> = (resource: T) => unknown;

interface Tracked {
  label: string;
  close: () => Promise<void>;
}

export interface Resources {
  /** Registers `resource` and returns it. Without `close`, a known shape (see closerFor) is required. */
  track<T extends object>(resource: T, close?: Close<T>, label?: string): T;
  /** Closes a tracked resource and forgets it. Closing an untracked one is an error. */
  close(resource: object): Promise<void>;
  /** Labels of what is still open. */
  open(): string[];
}

export class ResourceLeakError extends Error {
  readonly code = 'resource_leak';
  constructor(
    readonly leaked: string[],
    readonly closeFailures: string[],
  ) {
    super(
      `test leaked ${leaked.length} resource(s) still open at its end (closed now): ${leaked.join(', ')}` +
        (closeFailures.length ? `; closing failed for: ${closeFailures.join('; ')}` : ''),
    );
    this.name = 'ResourceLeakError';
  }
}

export function useResources(options: { scope?: 'test' | 'file' } = {}): Resources {
  const tracked = new Map<object, Tracked>();

  const resources: Resources = {
    track(resource, close, label) {
      if (tracked.has(resource)) throw new Error(`resource ${tracked.get(resource)!.label} is already tracked`);
      const closer = close ?? closerFor(resource);
      tracked.set(resource, {
        label: label ?? labelOf(resource),
        close: async () => {
          await closer(resource as never);
        },
      });
      return resource;
    },
    async close(resource) {
      const entry = tracked.get(resource);
      if (!entry) throw new Error(`resource ${labelOf(resource)} is not tracked (closed twice?)`);
      tracked.delete(resource);
      await entry.close();
    },
    open: () => [...tracked.values()].map((entry) => entry.label),
  };

  const check = async (): Promise<void> => {
    if (tracked.size === 0) return;
    // Close in reverse order of opening: workers before the connections and servers they use.
    const leaked = [...tracked.values()].reverse();
    tracked.clear();
    const closeFailures: string[] = [];
    for (const entry of leaked) {
      try {
        await entry.close();
      } catch (error) {
        closeFailures.push(`${entry.label}: ${error instanceof Error ? error.message : String(error)}`);
      }
    }
    throw new ResourceLeakError(
      leaked.map((entry) => entry.label),
      closeFailures,
    );
  };
  if (options.scope === 'file') afterAll(check);
  else afterEach(check);
  return resources;
}

/** How to close the shapes tests usually open; anything else needs an explicit `close`. */
function closerFor(resource: object): Close<never> {
  if (isChildProcess(resource)) return () => stopChildProcess(resource);
  if (isNetServer(resource)) return () => closeNetServer(resource);
  if (hasMethod(resource, 'shutdown')) return () => resource.shutdown();
  if (hasMethod(resource, 'end')) return () => resource.end();
  if (hasMethod(resource, 'close')) return () => resource.close();
  throw new Error(`no known way to close ${labelOf(resource)}; pass a close function to track()`);
}

/** SIGTERM, then SIGKILL if the child has not exited after `graceMs`; resolves once it has exited. */
export async function stopChildProcess(child: ChildProcess, graceMs = 5_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolveExit) => child.once('exit', () => resolveExit()));
  child.kill('SIGTERM');
  const escalation = setTimeout(() => child.kill('SIGKILL'), graceMs);
  try {
    await exited;
  } finally {
    clearTimeout(escalation);
  }
}

function closeNetServer(server: Server): Promise<void> {
  return new Promise((resolveClose, reject) => {
    if (!server.listening) return resolveClose();
    server.close((error) => (error ? reject(error) : resolveClose()));
    // A server waits for its open sockets; a leaked server's sockets are part of the leak.
    (server as Server & { closeAllConnections?: () => void }).closeAllConnections?.();
  });
}

function isChildProcess(value: object): value is ChildProcess {
  return 'pid' in value && hasMethod(value, 'kill') && 'exitCode' in value;
}

function isNetServer(value: object): value is Server {
  return 'listening' in value && hasMethod(value, 'close') && hasMethod(value, 'address');
}

function hasMethod<K extends string>(value: object, key: K): value is Record<K, () => unknown> {
  return typeof (value as Record<string, unknown>)[key] === 'function';
}

function labelOf(resource: object): string {
  const name = resource.constructor?.name ?? 'object';
  return isChildProcess(resource) ? `${name}(pid ${resource.pid ?? '?'})` : name;
}
