// `whalehunt-consumer backfill --direct` (the Temporal-free run for scripts) as operators run it (the compiled
// dist/cli/main.js as a child process) against the reference server's page endpoint and a real Postgres: a run
// applies the history once up to its target (the head at its first page) and a second run changes nothing;
// --max-pages and --until stop resumably; a stop that needs an operator exits 1 naming it; backfill-status shows
// the saved progress; the API key is in no output.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { loadPageProgress } from '../../db/pages.js';
import { formatCount } from '../../protocol/progress.js';
import { Journal } from '../../simulator/journal.js';
import { ReferenceStreamServer } from '../../simulator/server.js';
import { dumpState } from '../db/state-dump.js';
import { runCli } from '../support/cli.js';
import { useTestDatabase } from '../support/db.js';
import { useResources } from '../support/leaks.js';

const db = useTestDatabase();
const API_KEY = `wh-backfill-secret-${randomUUID()}`;

/** Every event the source serves gets exactly one receipt. */
function distinctEventIds(journal: Journal): number {
  const ids = new Set<string>();
  for (let i = 0, t = journal.at(0); t; t = journal.at(++i)) for (const event of t.events) ids.add(event.eventId);
  return ids.size;
}

describe('whalehunt-consumer backfill against the reference page source', () => {
  const res = useResources();

  async function stack(transitions: number) {
    const journal = Journal.generate({ seed: 31, transitions });
    const server = res.track(
      await ReferenceStreamServer.start({ journal, apiKeys: [API_KEY] }),
      (s) => s.close(),
      'reference stream server',
    );
    const env = {
      DATABASE_URL: db.url,
      WHALEHUNT_URL: server.url,
      WHALEHUNT_API_KEY: API_KEY,
      PAGE_STREAM: server.stream,
      PAGE_LIMIT: '20',
      PAGE_CHUNK_SIZE: '7',
      RECONNECT_MAX_ATTEMPTS: '1',
      RECONNECT_INITIAL_MS: '10',
      RECONNECT_MAX_MS: '10',
    };
    return { journal, server, run: (...args: string[]) => runCli(env, ...args) };
  }

  it('applies the history once; a second run changes nothing; backfill-status shows the saved progress', async () => {
    const { journal, server, run } = await stack(40);
    const consumerId = 'backfill-cli-1';

    const first = await run('backfill', '--direct', '--consumer', consumerId, '--filter', '{}');
    expect(first, first.stderr).toMatchObject({ code: 0 });
    expect(first.stdout).toContain(`backfill ${consumerId}: first run`);
    const head = journal.history.head;
    expect(first.stdout).toContain(
      `  target ${head} (the source's head at the first page; history ${journal.historyId})`,
    );
    expect(first.stdout).toMatch(new RegExp(`applied position ${head} of ${head} `));
    expect(first.stdout).toContain(`reached the target ${head}: applied position ${head}`);
    const progress = await loadPageProgress(db.pool, consumerId);
    expect(progress).toMatchObject({ appliedPosition: journal.history.head, historyId: journal.historyId });
    const applied = await dumpState(db.pool, consumerId);
    expect(applied.executions.length).toBeGreaterThan(0);
    expect(applied.receipts.length).toBe(distinctEventIds(journal));

    const second = await run('backfill', '--direct', '--consumer', consumerId, '--filter', '{}');
    expect(second, second.stderr).toMatchObject({ code: 0 });
    expect(second.stdout).toContain(`resuming at applied position ${journal.history.head}`);
    // At the head: the first answer repeats the saved cursor with nothing new, and the head is the target.
    expect(second.stdout).toContain(`reached the target ${head}: the source's head ${head} is at or past it`);
    expect(second.stdout).toContain('requests 1  pages 0');
    expect(second.stdout).toMatch(/new 0 {2}recognised \d+/);
    expect(await dumpState(db.pool, consumerId)).toEqual(applied);
    expect((await loadPageProgress(db.pool, consumerId))?.appliedPosition).toBe(journal.history.head);

    const status = await run('backfill-status', '--consumer', consumerId);
    expect(status, status.stderr).toMatchObject({ code: 0 });
    expect(status.stdout).toMatch(new RegExp(`applied position\\s+${journal.history.head}\\b`));
    expect(status.stdout).toContain('resume cursor     saved');
    // The chunks' counter: every applied receipt once, the second run's recognised events not again.
    const eventsApplied = applied.receipts.filter((r) => r.outcome === 'applied').length;
    expect(status.stdout).toMatch(new RegExp(`events applied\\s+${formatCount(eventsApplied)}\n`));
    const json = JSON.parse((await run('backfill-status', '--consumer', consumerId, '--json')).stdout) as {
      appliedPosition: number;
      eventsApplied: number;
    };
    expect(json).toMatchObject({ appliedPosition: journal.history.head, eventsApplied });

    for (const result of [first, second, status]) expect(result.stdout + result.stderr).not.toContain(API_KEY);
    await res.close(server);
  });

  it('--max-pages stops resumably (exit 0); a filter other than the bound one stops for an operator (exit 1)', async () => {
    const { journal, server, run } = await stack(60);
    const consumerId = 'backfill-cli-2';

    const limited = await run('backfill', '--direct', '--consumer', consumerId, '--filter', '{}', '--max-pages', '1');
    expect(limited, limited.stderr).toMatchObject({ code: 0 });
    expect(limited.stdout).toContain('page limit reached');
    const partial = await loadPageProgress(db.pool, consumerId);
    expect(partial!.appliedPosition).toBeGreaterThan(0);
    expect(partial!.appliedPosition).toBeLessThan(journal.history.head);

    // --until: a target of its own, however far the history goes.
    const until = partial!.appliedPosition + 5;
    const bounded = await run(
      'backfill',
      '--direct',
      '--consumer',
      consumerId,
      '--filter',
      '{}',
      '--until',
      `${until}`,
    );
    expect(bounded, bounded.stderr).toMatchObject({ code: 0 });
    expect(bounded.stdout).toContain(`  target ${until} (given with --until;`);
    expect(bounded.stdout).toMatch(new RegExp(`reached the target ${until}: applied position \\d+`));
    const stopped = (await loadPageProgress(db.pool, consumerId))!.appliedPosition;
    expect(stopped).toBeGreaterThanOrEqual(until);
    expect(stopped).toBeLessThan(journal.history.head);

    const rest = await run('backfill', '--direct', '--consumer', consumerId, '--filter', '{}');
    expect(rest, rest.stderr).toMatchObject({ code: 0 });
    expect(rest.stdout).toContain(`resuming at applied position ${stopped}`);
    expect((await loadPageProgress(db.pool, consumerId))?.appliedPosition).toBe(journal.history.head);
    const saved = await dumpState(db.pool, consumerId);
    expect(saved.receipts.length).toBe(distinctEventIds(journal));

    const rebound = await run('backfill', '--direct', '--consumer', consumerId, '--kinds', 'trade');
    expect(rebound.code).toBe(1);
    expect(rebound.stdout).toContain('stopped (binding_mismatch), needs an operator');
    expect(await dumpState(db.pool, consumerId)).toEqual(saved);
    await res.close(server);
  });

  it('names missing configuration (exit 2) and an unknown page consumer (exit 1) without echoing the key', async () => {
    const missing = await runCli(
      { DATABASE_URL: db.url, WHALEHUNT_URL: '', WHALEHUNT_API_KEY: '' },
      'backfill',
      '--direct',
      '--consumer',
      'x',
      '--filter',
      '{}',
    );
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('WHALEHUNT_URL: is required');
    expect(missing.stderr).toContain('WHALEHUNT_API_KEY: is required');

    const badLimit = await runCli(
      {
        DATABASE_URL: db.url,
        WHALEHUNT_URL: 'ws://127.0.0.1:9/v1/stream',
        WHALEHUNT_API_KEY: API_KEY,
        PAGE_LIMIT: 'lots',
      },
      'backfill',
      '--direct',
      '--consumer',
      'x',
      '--filter',
      '{}',
    );
    expect(badLimit.code).toBe(2);
    expect(badLimit.stderr).toContain('PAGE_LIMIT: must be a positive integer');
    expect(badLimit.stderr).not.toContain(API_KEY);

    const unknown = await runCli({ DATABASE_URL: db.url }, 'backfill-status', '--consumer', 'never-ran');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('error (unknown_consumer): no page consumer never-ran');
  });
});
