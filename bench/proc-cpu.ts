// CPU time of other processes, read from /proc (Linux): the reference server's, a worker's, and the Postgres
// server's. A bench samples before and after a timed window and subtracts; none of it runs inside a measured
// process.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import pg from 'pg';

/** Whether this machine has a Linux /proc to read CPU times from. */
export const HAS_PROC = existsSync('/proc/self/stat');

/** Clock ticks per second of /proc's times (USER_HZ, 100 on every Linux seen, but asked rather than assumed). */
const TICKS_PER_SECOND = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

interface ProcStat {
  ppid: number;
  /** utime + stime, ms */
  ownMs: number;
  /** cutime + cstime: the children it has waited for, ms */
  reapedChildrenMs: number;
}

function procStat(pid: number): ProcStat | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null; // exited
  }
  // The command name (field 2) may hold spaces; the fields after it are space-separated. Field 4 = ppid,
  // 14..17 = utime, stime, cutime, cstime.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  const ms = (i: number) => (Number(fields[i]) * 1000) / TICKS_PER_SECOND;
  return { ppid: Number(fields[1]), ownMs: ms(11) + ms(12), reapedChildrenMs: ms(13) + ms(14) };
}

/** utime + stime of a live process, in ms. */
export function processCpuMs(pid: number): number {
  const stat = procStat(pid);
  if (!stat) throw new Error(`process ${pid} is not in /proc`);
  return stat.ownMs;
}

/**
 * cutime + cstime of a live process, in ms: the CPU of the children it has waited for. Across one child's run (and
 * no other child exiting) the difference is that child's CPU, however short-lived it was.
 */
export function reapedChildrenCpuMs(pid: number = process.pid): number {
  const stat = procStat(pid);
  if (!stat) throw new Error(`process ${pid} is not in /proc`);
  return stat.reapedChildrenMs;
}

/** VmRSS and VmHWM (the peak) of a live process from /proc/<pid>/status, in KiB. */
export function processRssKiB(pid: number): { rss: number; peak: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rss: field('VmRSS'), peak: field('VmHWM') };
}

function commandName(pid: number): string | null {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return null;
  }
}

function children(pid: number): number[] {
  const file = `/proc/${pid}/task/${pid}/children`;
  if (existsSync(file)) {
    return readFileSync(file, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  }
  // Kernels without CONFIG_PROC_CHILDREN: every process's parent.
  return readdirSync('/proc')
    .filter((name) => /^\d+$/.test(name))
    .map(Number)
    .filter((child) => procStat(child)?.ppid === pid);
}

/** The Postgres server's CPU so far, in ms: what a bench subtracts across a timed window. */
export interface PostgresCpuSample {
  /**
   * The whole server: the postmaster's own and reaped children's time plus its live children's (backends,
   * checkpointer, WAL writer, …). Every client of the server counts, not only the bench's.
   */
  serverMs: number;
  /** The live backends connected to `database` alone (a backend's process title names its database), by pid. */
  backends: ReadonlyMap<number, number>;
}

/**
 * The CPU `database`'s backends spent between two samples, ms: each backend live at the end, less what it had
 * spent by the start (0 for one that connected since). A backend that exits in between is left out, its share
 * with it; subtracting sums instead would take away everything it had spent before the window (a pool's idle
 * connection closing mid-run, say the one that ran the migrations, made a run's figure negative). Null without
 * both samples.
 */
export function backendsCpuMs(
  start: PostgresCpuSample | null | undefined,
  end: PostgresCpuSample | null | undefined,
): number | null {
  if (!start || !end) return null;
  let ms = 0;
  for (const [pid, at] of end.backends) ms += at - (start.backends.get(pid) ?? 0);
  return ms;
}

export type PostgresCpu =
  | { available: true; postmasterPid: number; sample: (database: string) => PostgresCpuSample }
  | { available: false; reason: string };

const LOCAL_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]', '::1', '']);

/** The results' line about where Postgres CPU came from (or why it was not measured). */
export function describePostgresCpu(postgres: PostgresCpu): string {
  return postgres.available
    ? `Postgres postmaster pid ${postgres.postmasterPid}.`
    : `Postgres CPU not measured: ${postgres.reason}.`;
}

/**
 * Finds the Postgres server at `url` in /proc: the parent of the backend that serves a connection is the
 * postmaster. Unavailable when there is no /proc, the server is not on this machine, or the backend's pid is
 * not a postgres process here (another pid namespace, e.g. a container).
 */
export async function postgresCpu(url: string): Promise<PostgresCpu> {
  if (!HAS_PROC) return { available: false, reason: 'no /proc on this machine' };
  const host = new URL(url).hostname;
  if (!LOCAL_HOSTS.has(host)) return { available: false, reason: `Postgres at ${host} is not on this machine` };
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  let backend: number;
  let postmaster: number | undefined;
  let backendCommand: string | null;
  try {
    backend = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    // Read while connected: the backend exits with its connection.
    postmaster = procStat(backend)?.ppid;
    backendCommand = commandName(backend);
  } finally {
    await client.end();
  }
  if (postmaster === undefined || backendCommand !== 'postgres' || commandName(postmaster) !== 'postgres') {
    return { available: false, reason: `backend ${backend} is not a postgres process in this machine's /proc` };
  }
  return {
    available: true,
    postmasterPid: postmaster,
    sample: (database) => {
      // Children first, then the postmaster: a backend that exits in between is missed rather than counted twice.
      let serverMs = 0;
      const backends = new Map<number, number>();
      for (const child of children(postmaster)) {
        const stat = procStat(child);
        if (!stat) continue;
        serverMs += stat.ownMs;
        if (backendDatabase(child) === database) backends.set(child, stat.ownMs);
      }
      const own = procStat(postmaster);
      if (!own) throw new Error(`the postmaster (${postmaster}) exited`);
      serverMs += own.ownMs + own.reapedChildrenMs;
      return { serverMs, backends };
    },
  };
}

/** A backend's database from its process title ("postgres: [cluster: ]user database host(port) state"). */
function backendDatabase(pid: number): string | null {
  let title: string;
  try {
    title = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
  } catch {
    return null;
  }
  const match = /^postgres: (?:\S+: )?\S+ (\S+) /.exec(title);
  return match ? match[1]! : null;
}
