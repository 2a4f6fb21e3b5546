// What an operator is told when a consumer does not answer or its run looks stuck: "no worker" only when no worker
// polls; a frozen or gone worker is named with how long its attempt has been silent; busy workers are named busy.
import { describe, expect, it } from 'vitest';
import { attemptHint, noAnswerHint, silentForMs, type Attempt, type Poller } from '../../cli/worker-hint.js';

const NOW = Date.parse('2026-01-01T12:00:00.000Z');
const ago = (s: number) => NOW - s * 1_000;

const healthy: Attempt = {
  workerIdentity: '4242@worker-a',
  scheduledMs: ago(60),
  startedMs: ago(60),
  lastHeartbeatMs: ago(5),
  heartbeatTimeoutMs: 15_000,
};
const polling: Poller[] = [
  { identity: '4242@worker-a', lastAccessMs: ago(40) },
  { identity: '777@worker-b', lastAccessMs: ago(3) },
];
const hint = (pollers: Poller[] | null, attempt: Attempt | null) =>
  noAnswerHint({ taskQueue: 'whalehunt-consumer', pollers, attempt, nowMs: NOW });

describe('noAnswerHint', () => {
  it('says "start one" only when no poller exists; a listed worker that stopped polling is named, not denied', () => {
    expect(hint([], null)).toBe('no worker polls task queue whalehunt-consumer; start one (npm run worker)');
    // A worker inside a long poll last polled up to about a minute ago: it polls.
    expect(hint([{ identity: 'idle', lastAccessMs: ago(65) }], null)).toMatch(/^1 worker\(s\) poll task queue/);
    // One at capacity (every slot busy) polls no more; so does a frozen or stopped one, until Temporal drops it.
    expect(hint([{ identity: 'full', lastAccessMs: ago(150) }], null)).toBe(
      'no worker has polled task queue whalehunt-consumer for 150 s (full): each is at capacity (every slot busy), ' +
        'frozen or stopped',
    );
    expect(hint(null, null)).toBe('is a worker polling task queue whalehunt-consumer? (Temporal could not say)');
  });

  it('names the worker whose attempt stopped heartbeating, with how long, even while other workers poll', () => {
    const frozen = { ...healthy, lastHeartbeatMs: ago(14) };
    expect(hint(polling, frozen)).toBe(
      'the attempt on worker 4242@worker-a has not heartbeated for 14 s: that worker is frozen, overloaded or gone ' +
        '(Temporal times the attempt out after 15 s without a heartbeat and retries it on a live worker)',
    );
    // An attempt handed to a frozen worker's open poll never heartbeats at all.
    const neverBeat = { ...healthy, startedMs: ago(9), lastHeartbeatMs: ago(20) };
    expect(hint(polling, neverBeat)).toMatch(
      /^the attempt on worker 4242@worker-a has not heartbeated since it started/,
    );
    expect(hint(polling, neverBeat)).toMatch(/for 9 s/);
  });

  it('calls polling workers with a healthy attempt busy, and names them', () => {
    expect(hint(polling, healthy)).toBe(
      '2 worker(s) poll task queue whalehunt-consumer (4242@worker-a, 777@worker-b), but none answered in time: ' +
        'busy or overloaded (or frozen while holding this workflow: then Temporal hands it to another within seconds)',
    );
    expect(hint(polling, null)).toMatch(/^2 worker\(s\) poll/);
  });
});

describe('attemptHint (the status row)', () => {
  it('is silent while the attempt heartbeats as Temporal stores it (every 0.8 × the timeout at most)', () => {
    expect(attemptHint(healthy, NOW)).toBeNull();
    expect(silentForMs({ ...healthy, lastHeartbeatMs: ago(12.4) }, NOW)).toBeNull();
    expect(silentForMs({ ...healthy, lastHeartbeatMs: ago(12.6) }, NOW)).toBe(12_600);
    // The first heartbeat goes out at once: one missing after two heartbeat intervals is late.
    expect(silentForMs({ ...healthy, startedMs: ago(1.5), lastHeartbeatMs: null }, NOW)).toBeNull();
    expect(silentForMs({ ...healthy, startedMs: ago(2.5), lastHeartbeatMs: null }, NOW)).toBe(2_500);
    // A retried attempt shows its predecessor's last heartbeat: it has sent none of its own since it started.
    expect(silentForMs({ ...healthy, startedMs: ago(2.5), lastHeartbeatMs: ago(4) }, NOW)).toBe(2_500);
    // Without the attempt's own timeout, the default (3 s) is assumed.
    expect(silentForMs({ ...healthy, heartbeatTimeoutMs: null, lastHeartbeatMs: ago(2) }, NOW)).toBeNull();
    expect(silentForMs({ ...healthy, heartbeatTimeoutMs: null, lastHeartbeatMs: ago(3) }, NOW)).toBe(3_000);
    expect(attemptHint(null, NOW)).toBeNull();
  });

  it('says when the next run waits for a worker to start it', () => {
    const waiting = { ...healthy, startedMs: null, lastHeartbeatMs: null, workerIdentity: null, scheduledMs: ago(30) };
    expect(attemptHint(waiting, NOW)).toBe(
      'the next run has waited 30 s for a worker to start it (no worker polls, or none has a free activity slot)',
    );
    expect(attemptHint({ ...waiting, scheduledMs: ago(2) }, NOW)).toBeNull();
  });
});
