// What to tell an operator when a consumer's workflow does not answer or its streaming run looks stuck: pure, so
// every case is unit-tested. "No worker" only when no worker polls the task queue; a worker that polls but does not
// answer is busy or frozen, and an attempt that stopped heartbeating is named with its worker and how long.
import { DEFAULT_HEARTBEAT_TIMEOUT_MS } from '../workflows/definitions.js';

/** A worker polling the task queue, as DescribeTaskQueue lists it. */
export interface Poller {
  identity: string;
  /** When it last polled (ms since the epoch); null when Temporal does not say. */
  lastAccessMs: number | null;
}

/** The streaming run's current attempt, as DescribeWorkflowExecution's pending activity shows it. */
export interface Attempt {
  /** The worker it runs on (or last ran on); null before a worker took it. */
  workerIdentity: string | null;
  /** Scheduled but not started: waiting for a worker with a free slot. */
  startedMs: number | null;
  scheduledMs: number | null;
  lastHeartbeatMs: number | null;
  /** The attempt's heartbeat timeout; DEFAULT_HEARTBEAT_TIMEOUT_MS when Temporal does not say. */
  heartbeatTimeoutMs: number | null;
}

/**
 * A worker with a free slot polls again as soon as a long poll ends (Temporal holds one up to a minute), so its last
 * poll is never older than this. One that has not polled for longer is at capacity, frozen or stopped; Temporal
 * lists a worker until 5 minutes after its last poll.
 */
export const POLL_WINDOW_MS = 70_000;
/** How often a streaming run heartbeats (HEARTBEAT_MS's default): its first heartbeat comes this soon. */
export const RUN_HEARTBEAT_EVERY_MS = 1_000;

/**
 * How long the attempt has gone without the heartbeats a live worker sends, or null while it heartbeats as it
 * should. Temporal stores a heartbeat at most every 0.8 × the heartbeat timeout (the SDK throttles them), so only
 * an older one says the worker stopped; an attempt that has not heartbeated since it started (a retried attempt
 * shows its predecessor's last heartbeat) is late after two intervals, its first one going out at once.
 */
export function silentForMs(attempt: Attempt, nowMs: number): number | null {
  if (attempt.startedMs === null) return null;
  const timeoutMs = attempt.heartbeatTimeoutMs ?? DEFAULT_HEARTBEAT_TIMEOUT_MS;
  const beat = attempt.lastHeartbeatMs !== null && attempt.lastHeartbeatMs >= attempt.startedMs;
  const since = beat ? attempt.lastHeartbeatMs! : attempt.startedMs;
  const allowedMs = beat ? 0.8 * timeoutMs + 500 : 2 * RUN_HEARTBEAT_EVERY_MS;
  const silent = nowMs - since;
  return silent > allowedMs ? silent : null;
}

/** A line about the streaming attempt when it looks stuck (frozen, gone, or waiting for a worker); else null. */
export function attemptHint(attempt: Attempt | null, nowMs: number): string | null {
  if (attempt === null) return null;
  const silent = silentForMs(attempt, nowMs);
  const timeoutS = Math.round((attempt.heartbeatTimeoutMs ?? DEFAULT_HEARTBEAT_TIMEOUT_MS) / 1000);
  if (silent !== null) {
    const beat = attempt.lastHeartbeatMs !== null && attempt.lastHeartbeatMs >= (attempt.startedMs ?? 0);
    const what = beat ? 'has not heartbeated' : 'has not heartbeated since it started';
    return (
      `the attempt on worker ${attempt.workerIdentity ?? '(unknown)'} ${what} for ${seconds(silent)} s: that worker ` +
      `is frozen, overloaded or gone (Temporal times the attempt out after ${timeoutS} s without a heartbeat and ` +
      'retries it on a live worker)'
    );
  }
  if (attempt.startedMs === null && attempt.scheduledMs !== null && nowMs - attempt.scheduledMs > 5_000) {
    return (
      `the next run has waited ${seconds(nowMs - attempt.scheduledMs)} s for a worker to start it ` +
      '(no worker polls, or none has a free activity slot)'
    );
  }
  return null;
}

/**
 * Why a workflow did not answer a query or an update in time: no worker polls the task queue (start one); a worker
 * polls but its streaming attempt stopped heartbeating (named); or workers poll and are busy.
 */
export function noAnswerHint(input: {
  taskQueue: string;
  /** null: Temporal could not say who polls. */
  pollers: Poller[] | null;
  attempt: Attempt | null;
  nowMs: number;
}): string {
  const { taskQueue, pollers, nowMs } = input;
  const stuck = attemptHint(input.attempt, nowMs);
  if (pollers === null) return stuck ?? `is a worker polling task queue ${taskQueue}? (Temporal could not say)`;
  if (pollers.length === 0) return `no worker polls task queue ${taskQueue}; start one (npm run worker)`;
  if (stuck !== null) return stuck;
  const polling = pollers.filter((p) => p.lastAccessMs === null || nowMs - p.lastAccessMs <= POLL_WINDOW_MS);
  if (polling.length === 0) {
    const last = Math.max(...pollers.map((p) => p.lastAccessMs ?? 0));
    return (
      `no worker has polled task queue ${taskQueue} for ${seconds(nowMs - last)} s ` +
      `(${pollers.map((p) => p.identity).join(', ')}): each is at capacity (every slot busy), frozen or stopped`
    );
  }
  const named = polling.map((p) => p.identity).join(', ');
  return (
    `${polling.length} worker(s) poll task queue ${taskQueue} (${named}), but none answered in time: ` +
    'busy or overloaded (or frozen while holding this workflow: then Temporal hands it to another within seconds)'
  );
}

function seconds(ms: number): number {
  return Math.round(ms / 1000);
}
