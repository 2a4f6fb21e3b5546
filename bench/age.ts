// Cost against age (issue 25): the same measurements on one scratch database as it grows from empty tables to
// tens of millions of receipts (BENCH_AGE_SIZES, default 0, 10M and 50M). Each stage loads its history in SQL
// (INSERT … SELECT generate_series, every index of the migrated schema in place, as in production), runs VACUUM
// ANALYZE as autovacuum eventually would and a CHECKPOINT, then measures the consumer that has aged:
// commitCheckpoint p50/p99 at 1, 100 and 1,000 events (interleaved), the `status` command's database read,
// consumeStream end to end against the reference server, and bytes on disk per receipt of every table. Ratios are
// against the empty stage of the same run. Writes bench/results/age.json and age.md. Long: not part of `all`.
import { rmSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { retentionView } from '../cli/retention.js';
import { acquireLease, commitCheckpoint, consumerSummary, createPool, migrate } from '../db/index.js';
import { eventIdOf } from '../simulator/journal-generator.js';
import { Journal } from '../simulator/journal.js';
import { freshCheckpoints } from './fixtures.js';
import { SEED, probeHead, startSimulator, stopSimulator } from './simulator-process.js';
import type { StreamRunResult } from './stream-run.js';
import {
  ROOT,
  describeMachine,
  machineState,
  median,
  percentile,
  round,
  runBenchProcess,
  table,
  withScratchDatabase,
  writeResults,
  type BenchContext,
  type MachineState,
} from './support.js';

const STAGES = (process.env.BENCH_AGE_SIZES ?? '0,10000000,50000000').split(',').map(Number);
/** Rows per loading statement: a few seconds each, so that progress shows. */
const CHUNK = Number(process.env.BENCH_AGE_CHUNK ?? 2_000_000);
/** Samples per checkpoint size (after WARMUP): enough for a p99 that is not simply the maximum. */
const COMMIT_ITERATIONS: Record<number, number> = { 1: 400, 100: 200, 1_000: 200 };
const WARMUP = 5;
/**
 * Status reads, after the commits rather than among them: a read that scans the consumer's executions would evict
 * the commits' pages from shared_buffers, and a status is an operator's occasional command, not the commits' company.
 */
const STATUS_SAMPLES = Number(process.env.BENCH_STATUS_SAMPLES ?? 50);
/** …or fewer, once the reads have taken this long: a read that scans grows with the history. */
const STATUS_BUDGET_MS = 120_000;
const STATUS_MIN_SAMPLES = 5;
const STATUS_WARMUP = 3;

const TRANSITIONS = Number(process.env.BENCH_TRANSITIONS ?? 100_000);
const STREAM_ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CHECKPOINT_EVERY = 100;

/** The consumer that ages and is measured; OTHERS hold a fifth of the rows, in blocks of 1,000. */
const AGED = 'aged';
const OTHERS = 4;
/** The loaded history's simulator seed: its event ids (`ev-a6e-…`) are nobody else's. */
const HISTORY_SEED = 0xa6e;
/** The commit measurement's events (`ev-c0-…`), at positions from COMMIT_BASE: above every loaded one. */
const COMMIT_SEED = 0xc0;
const COMMIT_BASE = 1_000_000_000;
/** The stream's journal is renumbered from here: above the loaded history and the commit measurement. */
const STREAM_SHIFT = 2_000_000_000;

/** Event i of the loaded history (0-based), as SQL over `i`: the journal is shared, two events per position. */
const HISTORY = {
  consumer: `CASE WHEN (i / 1000) % 5 = 4 THEN 'other-' || ((i / 5000) % ${OTHERS}) ELSE '${AGED}' END`,
  eventId: (i: string) => `'ev-${HISTORY_SEED.toString(16)}-' || bench_b36(${i} + 1)`,
  position: (i: string) => `(${i}) / 2 + 1`,
  // An older history's entities sort before the stream's (`trade-<seq>-…`, seq from 0 in every journal), as a feed's
  // sequential entity ids would: `trade-` with the loader's 7 digits interleaved with the stream's 6 and scattered
  // its inserts over the whole executions key (e2e 1.30× slower at 50M in the run that did).
  entityId: (i: string) => `'old-' || bench_b36(${i} + 1) || '-' || substr(md5((${i})::text), 1, 8)`,
  price: `(((i % 97) + 1) * 0.01)`,
  size: `((i % 400) + 1.25)`,
  market: `'m-' || (i % 50)`,
};

/** The simulator's eventIdOf in SQL: base 36, padded to 7 (the loader's only helper; inlined by the planner). */
const DIGITS = `'0123456789abcdefghijklmnopqrstuvwxyz'`;
const LOADER_HELPER = `CREATE FUNCTION bench_b36(n bigint) RETURNS text IMMUTABLE LANGUAGE sql AS $$ SELECT ${Array.from(
  { length: 7 },
  (_, k) => `substr(${DIGITS}, (n / ${36 ** (6 - k)} % 36)::int + 1, 1)`,
).join(' || ')} $$`;

/**
 * The history's events [from, to): 90% trades (an execution each), 5% corrections of the trade before them (a
 * superseded revision each), 5% events that apply nothing; 2% whale alerts in the outbox, nine in ten suppressed as
 * replayed, the rest sent. market_volumes carries the executions' aggregates, as the commit keeps them.
 */
function loadStatements(from: number, to: number): { table: string; sql: string }[] {
  const series = `FROM generate_series(${from}::bigint, ${to - 1}::bigint) AS i`;
  const h = HISTORY;
  const corrected = 'i % 20 = 8';
  const trade = `i % 10 <> 9`;
  return [
    {
      table: 'event_receipts',
      sql: `INSERT INTO event_receipts (consumer_id, event_id, content_hash, position, ordinal, outcome)
            SELECT ${h.consumer}, ${h.eventId('i')}, '\\x02'::bytea || decode(md5(i::text) || md5((-i)::text), 'hex'), ${h.position('i')},
                   i % 2 + 1, CASE WHEN i % 20 = 19 THEN 'no_effect' ELSE 'applied' END ${series}`,
    },
    {
      table: 'executions',
      sql: `INSERT INTO executions (consumer_id, entity_id, revision, market, asset, side, price, size, notional, wallet,
                                    tx_hash, first_position, last_position, event_id)
            SELECT ${h.consumer}, ${h.entityId('i')}, CASE WHEN ${corrected} THEN 2 ELSE 1 END, ${h.market},
                   'asset-' || (i % 50), CASE WHEN i % 2 = 0 THEN 'BUY' ELSE 'SELL' END, ${h.price}, ${h.size},
                   ${h.price} * ${h.size}, '0x' || substr(md5('w' || (i % 5000)), 1, 40),
                   '0x' || md5(i::text) || md5((i + 1)::text), ${h.position('i')},
                   CASE WHEN ${corrected} THEN ${h.position('i + 1')} ELSE ${h.position('i')} END,
                   CASE WHEN ${corrected} THEN ${h.eventId('i + 1')} ELSE ${h.eventId('i')} END
              ${series} WHERE ${trade}`,
    },
    {
      table: 'execution_revisions',
      // Event i (i % 20 = 9) corrects trade i - 1: its first revision moved here.
      sql: `INSERT INTO execution_revisions (consumer_id, entity_id, revision, event_id, position, market, asset, side,
                                             price, size, notional, wallet, tx_hash)
            SELECT ${h.consumer}, ${h.entityId('i - 1')}, 1, ${h.eventId('i - 1')}, ${h.position('i - 1')},
                   'm-' || ((i - 1) % 50), 'asset-' || ((i - 1) % 50), CASE WHEN (i - 1) % 2 = 0 THEN 'BUY' ELSE 'SELL' END,
                   (((i - 1) % 97) + 1) * 0.01, ((i - 1) % 400) + 1.25,
                   (((i - 1) % 97) + 1) * 0.01 * (((i - 1) % 400) + 1.25),
                   '0x' || substr(md5('w' || ((i - 1) % 5000)), 1, 40), '0x' || md5((i - 1)::text) || md5(i::text)
              ${series} WHERE i % 20 = 9`,
    },
    {
      table: 'outbox',
      sql: `INSERT INTO outbox (consumer_id, idempotency_key, event_id, action, payload, status, suppressed_reason,
                                attempts, completed_at)
            SELECT ${h.consumer}, 'whale_alert:' || ${h.eventId('i')}, ${h.eventId('i')}, 'whale_alert',
                   jsonb_build_object('kind', 'trade', 'position', ${h.position('i')}, 'delivery', 'replay',
                     'observedAt', '2026-06-01T00:00:00.000Z', 'entityId', ${h.entityId('i')}, 'revision', 1,
                     'market', ${h.market}, 'asset', 'asset-' || (i % 50), 'side', CASE WHEN i % 2 = 0 THEN 'BUY' ELSE 'SELL' END,
                     'price', ${h.price}::text, 'size', ${h.size}::text, 'notional', (${h.price} * ${h.size})::text,
                     'wallet', '0x' || substr(md5('w' || (i % 5000)), 1, 40), 'txHash', '0x' || md5(i::text) || md5((i + 1)::text),
                     'eventId', ${h.eventId('i')}),
                   CASE WHEN (i / 50) % 10 = 0 THEN 'done' ELSE 'suppressed' END,
                   CASE WHEN (i / 50) % 10 = 0 THEN NULL ELSE 'replay' END,
                   CASE WHEN (i / 50) % 10 = 0 THEN 1 ELSE 0 END,
                   CASE WHEN (i / 50) % 10 = 0 THEN now() END
              ${series} WHERE i % 50 = 7`,
    },
    {
      table: 'market_volumes',
      sql: `INSERT INTO market_volumes (consumer_id, market, volume, execution_count)
            SELECT ${h.consumer}, ${h.market}, sum(${h.price} * ${h.size}), count(*) ${series} WHERE ${trade}
             GROUP BY 1, 2
            ON CONFLICT (consumer_id, market) DO UPDATE
               SET volume = market_volumes.volume + EXCLUDED.volume,
                   execution_count = market_volumes.execution_count + EXCLUDED.execution_count`,
    },
  ];
}

/** Loads events [from, to) of the history, printing progress per chunk; resolves with the seconds it took. */
async function loadHistory(admin: pg.Client, from: number, to: number): Promise<number> {
  const t = performance.now();
  for (let a = from; a < to; a += CHUNK) {
    const b = Math.min(to, a + CHUNK);
    const c = performance.now();
    for (const statement of loadStatements(a, b)) await admin.query(statement.sql);
    console.log(`  loaded events ${a}..${b - 1} in ${round((performance.now() - c) / 1000)} s`);
  }
  // The last position of each consumer's history: its checkpoint, as the commits that wrote it left it.
  await admin.query(
    `UPDATE checkpoints c SET position = m.position, cut_position = m.position, cut_reached = true, generation = 1,
            token = 'tok:1:' || m.position
       FROM (SELECT consumer_id, max(position) AS position FROM event_receipts
              WHERE consumer_id LIKE 'other-%' GROUP BY consumer_id) m
      WHERE c.consumer_id = m.consumer_id`,
  );
  const v = performance.now();
  await admin.query('VACUUM ANALYZE');
  // The load's and the vacuum's dirty pages written out now, not during the measurement: an aged database wrote
  // its history out long ago.
  await admin.query('CHECKPOINT');
  console.log(`  VACUUM ANALYZE and CHECKPOINT in ${round((performance.now() - v) / 1000)} s`);
  return round((performance.now() - t) / 1000);
}

interface LatencySeries {
  p50Ms: number;
  p99Ms: number;
  samples: number;
}
function latency(ms: number[]): LatencySeries {
  const sorted = [...ms].sort((a, b) => a - b);
  return { p50Ms: round(percentile(sorted, 50), 2), p99Ms: round(percentile(sorted, 99), 2), samples: ms.length };
}

interface StreamFigures {
  runs: number;
  events: number;
  /** median over the runs */
  eventsPerSecond: number;
  wallMs: number;
  commitP50Ms: number;
  commitP99Ms: number;
}

interface TableSize {
  table: string;
  rows: number;
  totalBytes: number;
  indexBytes: number;
  /** per receipt of every consumer; null on empty tables */
  bytesPerEvent: number | null;
  indexBytesPerEvent: number | null;
}
interface IndexSize {
  index: string;
  table: string;
  bytes: number;
}

interface Stage {
  /** the history loaded (BENCH_AGE_SIZES) */
  loaded: number;
  /** every consumer's receipts before the stage's measurement: the history and what earlier stages committed */
  receipts: number;
  /** the aged consumer's share */
  agedReceipts: number;
  loadSeconds: number;
  commit: Record<string, LatencySeries>;
  status: LatencySeries;
  /** shared_buffers hits and reads of each relation over the measured commits */
  buffers: BlockDelta[];
  /** auto_explain's NOTICEs of one more commit of each size (plans with ANALYZE and BUFFERS) */
  commitPlans: Record<string, string[]>;
  stream: StreamFigures;
  /** the same measures on the empty database measured beside this stage's, in the same seconds */
  anchor: { commit: Record<string, LatencySeries>; status: LatencySeries; stream: StreamFigures };
  tables: TableSize[];
  indexes: IndexSize[];
  machine: MachineState;
}

/**
 * A scratch database migrated by this tree, with a checkpoint row for each of `consumers`, as a subject whose commits
 * start above everything the history loads; dropped afterwards. The aged database is one, and so is each stage's
 * anchor (the aged consumer's row alone, nothing loaded).
 */
async function withSubject<T>(prefix: string, consumers: string[], fn: (subject: Subject) => Promise<T>): Promise<T> {
  return withScratchDatabase(prefix, async (url) => {
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    const pool = createPool(url, { max: 2 });
    try {
      await migrate(pool);
      for (const id of consumers) await acquireLease(pool, id);
      return await fn({ url, admin, pool, nextPlan: commitPlans(), position: COMMIT_BASE });
    } finally {
      await pool.end();
      await admin.end();
    }
  });
}

/** The journal the stream replays, renumbered above everything loaded; its event and entity ids, to forget them. */
async function writeJournal(file: string): Promise<{ eventIds: string[]; entityIds: string[] }> {
  const journal = Journal.generate({ seed: SEED, transitions: TRANSITIONS });
  journal.rebuildHistory({ shift: STREAM_SHIFT });
  await journal.save(file);
  const eventIds: string[] = [];
  const entityIds = new Set<string>();
  for (const t of journal.range(0, journal.head)) {
    for (const e of t.events) {
      eventIds.push(e.eventId);
      entityIds.add(e.entityId);
    }
  }
  return { eventIds, entityIds: [...entityIds] };
}

export async function runAgeBench(ctx: BenchContext): Promise<void> {
  if (STAGES[0] !== 0 || STAGES.some((n, i) => i > 0 && n <= STAGES[i - 1]!))
    throw new Error('BENCH_AGE_SIZES must start at 0 and increase');
  const start = machineState();
  const dir = mkdtempSync(join(tmpdir(), 'whalehunt-age-'));
  try {
    const journalFile = join(dir, 'journal.jsonl');
    const ids = await writeJournal(journalFile);
    const sim = await startSimulator({ transitions: TRANSITIONS, checkpointEvery: CHECKPOINT_EVERY, journalFile });
    try {
      const cut = await probeHead(sim.url);
      const consumers = [AGED, ...Array.from({ length: OTHERS }, (_, k) => `other-${k}`)];
      await withSubject('whalehunt_bench_age', consumers, async (aged) => {
        const { admin } = aged;
        await admin.query(LOADER_HELPER);
        const settings = await admin.query<{ name: string; setting: string; unit: string | null }>(
          `SELECT name, setting, unit FROM pg_settings
              WHERE name IN ('shared_buffers', 'effective_cache_size', 'work_mem', 'max_wal_size', 'server_version')`,
        );
        const stages: Stage[] = [];
        let loaded = 0;
        for (const size of STAGES) {
          console.log(`stage ${size} receipts: loading ${size - loaded}`);
          const loadSeconds = size > loaded ? await loadHistory(admin, loaded, size) : 0;
          loaded = size;
          // Before the measurement adds its own rows (and the replays their deleted ones): the history alone.
          const { tables, indexes, receipts, agedReceipts } = await diskUsage(admin);
          const stage = await withSubject('whalehunt_bench_age_anchor', [AGED], async (anchor) => {
            const measured = await measureCommitsAndStatus(aged, anchor);
            const [stream, anchorStream] = await measureStreams([aged, anchor], sim.url, cut, ids);
            return {
              loaded: size,
              receipts,
              agedReceipts,
              loadSeconds,
              commit: measured.aged.commit,
              status: measured.aged.status,
              buffers: measured.buffers,
              commitPlans: measured.commitPlans,
              stream: stream!,
              anchor: { commit: measured.anchor.commit, status: measured.anchor.status, stream: anchorStream! },
              tables,
              indexes,
              machine: machineState(),
            };
          });
          stages.push(stage);
          const p99s = (commit: Record<string, LatencySeries>) =>
            Object.entries(commit)
              .map(([n, series]) => `${n}:${series.p99Ms}`)
              .join(' ');
          console.log(
            `stage ${size}: commit p99 ${p99s(stage.commit)} ms (anchor ${p99s(stage.anchor.commit)}), status p99 ` +
              `${stage.status.p99Ms} ms (anchor ${stage.anchor.status.p99Ms}), stream ${stage.stream.eventsPerSecond} ` +
              `ev/s (anchor ${stage.anchor.stream.eventsPerSecond})`,
          );
        }
        writeAgeResults(ctx, stages, settings.rows, start, cut - STREAM_SHIFT);
      });
    } finally {
      await stopSimulator(sim);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const AUTO_EXPLAIN = `LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; SET auto_explain.log_analyze = on;
  SET auto_explain.log_buffers = on; SET auto_explain.log_nested_statements = on; SET auto_explain.log_level = notice`;

/** Blocks of each table and index found in shared_buffers (hit) or read from the OS (read), since the server began. */
interface BlockDelta {
  relation: string;
  read: number;
  hit: number;
  readPer1000Events: number;
  hitPer1000Events: number;
}
async function blockCounts(admin: pg.Client): Promise<Map<string, { read: number; hit: number }>> {
  const res = await admin.query<{ relation: string; read: string; hit: string }>(
    `SELECT relname || ' (heap)' AS relation, heap_blks_read AS read, heap_blks_hit AS hit FROM pg_statio_user_tables
     UNION ALL
     SELECT indexrelname, idx_blks_read, idx_blks_hit FROM pg_statio_user_indexes`,
  );
  return new Map(res.rows.map((r) => [r.relation, { read: Number(r.read), hit: Number(r.hit) }]));
}

/**
 * A database the consumer `aged` commits to, is read by `status` from and replays into: the aged one, or the empty
 * anchor measured beside it at every stage. `position`: where its last commit left the checkpoint.
 */
interface Subject {
  url: string;
  admin: pg.Client;
  pool: pg.Pool;
  nextPlan: ReturnType<typeof freshCheckpoints>;
  position: number;
}

/** What one subject's commits and status reads took at a stage. */
interface Measured {
  commit: Record<string, LatencySeries>;
  status: LatencySeries;
}

/** The subjects (0 aged, 1 anchor) in the order they take their `turn`: which goes first alternates. */
function turnOrder(turn: number): readonly [number, number] {
  return turn % 2 === 0 ? [0, 1] : [1, 0];
}

/** The commits' checkpoints: positions above everything loaded, event ids nobody else's. */
function commitPlans(): ReturnType<typeof freshCheckpoints> {
  return freshCheckpoints(AGED, { after: COMMIT_BASE, eventId: (serial) => eventIdOf(COMMIT_SEED, serial) });
}

/**
 * Commits of 1, 100 and 1,000 events by the aged consumer, interleaved (each size while it has samples left, the
 * order alternating), each sample taken on the aged database and on the anchor one after the other (which first,
 * alternating too), then the status reads the same way: the anchor's figures are taken in the same seconds as the
 * aged one's, so a machine that slows down for a while slows both. Block counts and plans are the aged database's.
 */
async function measureCommitsAndStatus(
  aged: Subject,
  anchor: Subject,
): Promise<{ aged: Measured; anchor: Measured; buffers: BlockDelta[]; commitPlans: Record<string, string[]> }> {
  const subjects = [aged, anchor];
  const fences: { leaseEpoch: number; version: number }[] = [];
  for (const subject of subjects) {
    await subject.admin.query(
      `UPDATE checkpoints SET position = $2, token = $3, generation = 1, cut_position = $2, cut_reached = true,
              pending_start = NULL WHERE consumer_id = $1`,
      [AGED, subject.position, `tok:1:${subject.position}`],
    );
    const lease = await acquireLease(subject.pool, AGED);
    fences.push({ leaseEpoch: lease.leaseEpoch, version: lease.version });
  }
  const commit = async (index: number, size: number, pool = subjects[index]!.pool): Promise<number> => {
    const subject = subjects[index]!;
    const plan = subject.nextPlan(size, fences[index]!);
    const t = performance.now();
    const result = await commitCheckpoint(pool, plan);
    const ms = performance.now() - t;
    if (result.kind !== 'committed') throw new Error(`age bench commit did not commit: ${JSON.stringify(result)}`);
    fences[index] = { leaseEpoch: fences[index]!.leaseEpoch, version: result.version };
    subject.position = plan.checkpoint.position;
    return ms;
  };
  const buffersBefore = await blockCounts(aged.admin);
  const sizes = Object.keys(COMMIT_ITERATIONS).map(Number);
  const series = subjects.map(() => new Map<number, number[]>(sizes.map((s) => [s, []])));
  const rounds = WARMUP + Math.max(...Object.values(COMMIT_ITERATIONS));
  let turn = 0;
  for (let i = 0; i < rounds; i++) {
    for (const size of i % 2 === 0 ? sizes : [...sizes].reverse()) {
      if (i >= WARMUP + COMMIT_ITERATIONS[size]!) continue;
      for (const index of turnOrder(turn++)) {
        const ms = await commit(index, size);
        if (i >= WARMUP) series[index]!.get(size)!.push(ms);
      }
    }
  }
  // Block counts reach pg_statio when a backend flushes its statistics (at most once a second): the last second of
  // the commits may be missing.
  const buffersAfter = await blockCounts(aged.admin);
  const committedEvents = sizes.reduce((a, size) => a + size * (WARMUP + COMMIT_ITERATIONS[size]!), 0);
  const buffers = [...buffersAfter]
    .map(([relation, after]) => {
      const before = buffersBefore.get(relation) ?? { read: 0, hit: 0 };
      return { relation, read: after.read - before.read, hit: after.hit - before.hit };
    })
    .filter((b) => b.read + b.hit > 0)
    .map((b) => ({
      ...b,
      readPer1000Events: round((b.read * 1000) / committedEvents),
      hitPer1000Events: round((b.hit * 1000) / committedEvents),
    }))
    .sort((a, b) => b.read + b.hit - (a.read + a.hit));

  // A checkpoint of each size once more on the aged database, on a connection with auto_explain at NOTICE level:
  // the plans of the commit statements as the commit runs them, with ANALYZE and BUFFERS.
  const explaining = createPool(aged.url, { max: 1 });
  const notices: string[] = [];
  const plans: Record<string, string[]> = {};
  try {
    // Its one connection, set up before the commits check it out.
    const client = await explaining.connect();
    client.on('notice', (notice) => notices.push(notice.message ?? ''));
    await client.query(AUTO_EXPLAIN);
    client.release();
    for (const size of sizes) {
      notices.length = 0;
      await commit(0, size, explaining);
      plans[String(size)] = [...notices];
    }
  } finally {
    await explaining.end();
  }

  const status = subjects.map((): number[] => []);
  const began = performance.now();
  for (let i = 0; i < STATUS_WARMUP + STATUS_SAMPLES; i++) {
    if (status[0]!.length >= STATUS_MIN_SAMPLES && performance.now() - began > STATUS_BUDGET_MS) break;
    for (const index of turnOrder(i)) {
      const { pool } = subjects[index]!;
      const t = performance.now();
      if (!(await consumerSummary(pool, AGED))) throw new Error('status found no consumer');
      await retentionView(pool);
      if (i >= STATUS_WARMUP) status[index]!.push(performance.now() - t);
    }
  }
  const measured = (index: number): Measured => ({
    commit: Object.fromEntries(sizes.map((s) => [String(s), latency(series[index]!.get(s)!)])),
    status: latency(status[index]!),
  });
  return { aged: measured(0), anchor: measured(1), buffers, commitPlans: plans };
}

/**
 * STREAM_ROUNDS replays of the journal by the aged consumer into each subject, the subjects taking turns (which
 * first, alternating), each an operator's from_floor (recorded in its checkpoint, as `resolve-gap --decision
 * from_floor` records it) after the previous replay's rows are forgotten: every round applies the same new events on
 * top of the same history.
 */
async function measureStreams(
  subjects: readonly Subject[],
  simUrl: string,
  cut: number,
  ids: { eventIds: string[]; entityIds: string[] },
): Promise<StreamFigures[]> {
  const runs = subjects.map((): StreamRunResult[] => []);
  for (let r = 0; r < STREAM_ROUNDS; r++) {
    for (const index of turnOrder(r)) {
      const { admin, url } = subjects[index]!;
      await forgetStream(admin, ids);
      await admin.query(`UPDATE checkpoints SET pending_start = 'from_floor' WHERE consumer_id = $1`, [AGED]);
      runs[index]!.push(
        await runBenchProcess<StreamRunResult>('stream-run.ts', 'age stream run', {
          BENCH_URL: simUrl,
          BENCH_CUT: String(cut),
          BENCH_CONSUMER: AGED,
          BENCH_TARGET_ROOT: ROOT,
          BENCH_RUN_MODE: 'timed',
          BENCH_DATABASE_URL: url,
        }),
      );
    }
  }
  const events = runs[0]![0]!.events;
  if (runs.some((of) => of.some((r) => r.events !== events)))
    throw new Error('stream runs disagree on the event count');
  return runs.map((of) => {
    const commits = of.flatMap((r) => r.commitMs).sort((a, b) => a - b);
    return {
      runs: of.length,
      events,
      eventsPerSecond: Math.round(median(of.map((r) => r.events / (r.wallMs / 1000)))),
      wallMs: Math.round(median(of.map((r) => r.wallMs))),
      commitP50Ms: round(percentile(commits, 50), 2),
      commitP99Ms: round(percentile(commits, 99), 2),
    };
  });
}

/** Deletes what a replay of the journal wrote for the aged consumer, by its keys (the indexes find them). */
async function forgetStream(admin: pg.Client, ids: { eventIds: string[]; entityIds: string[] }): Promise<void> {
  const keys = ids.eventIds.map((id) => `whale_alert:${id}`);
  await admin.query('DELETE FROM event_receipts WHERE consumer_id = $1 AND event_id = ANY($2)', [AGED, ids.eventIds]);
  await admin.query('DELETE FROM quarantine WHERE consumer_id = $1 AND event_id = ANY($2)', [AGED, ids.eventIds]);
  await admin.query('DELETE FROM executions WHERE consumer_id = $1 AND entity_id = ANY($2)', [AGED, ids.entityIds]);
  await admin.query('DELETE FROM execution_revisions WHERE consumer_id = $1 AND entity_id = ANY($2)', [
    AGED,
    ids.entityIds,
  ]);
  await admin.query('DELETE FROM outbox WHERE consumer_id = $1 AND idempotency_key = ANY($2)', [AGED, keys]);
}

async function diskUsage(
  admin: pg.Client,
): Promise<{ tables: TableSize[]; indexes: IndexSize[]; receipts: number; agedReceipts: number }> {
  const counts = await admin.query<{ receipts: string; aged: string }>(
    `SELECT count(*) AS receipts, count(*) FILTER (WHERE consumer_id = $1) AS aged FROM event_receipts`,
    [AGED],
  );
  const receipts = Number(counts.rows[0]!.receipts);
  const tables = await admin.query<{ table: string; rows: string; total: string; indexes: string }>(
    `SELECT c.relname AS table, greatest(c.reltuples, 0)::bigint AS rows, pg_total_relation_size(c.oid) AS total,
            pg_indexes_size(c.oid) AS indexes
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = 'public' AND c.relkind = 'r' ORDER BY pg_total_relation_size(c.oid) DESC`,
  );
  const indexes = await admin.query<{ index: string; table: string; bytes: string }>(
    `SELECT i.relname AS index, t.relname AS table, pg_relation_size(i.oid) AS bytes
       FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
       JOIN pg_namespace n ON n.oid = t.relnamespace
      WHERE n.nspname = 'public' ORDER BY pg_relation_size(i.oid) DESC`,
  );
  const perEvent = (bytes: number) => (receipts === 0 ? null : round(bytes / receipts));
  return {
    receipts,
    agedReceipts: Number(counts.rows[0]!.aged),
    tables: tables.rows.map((r) => ({
      table: r.table,
      rows: Number(r.rows),
      totalBytes: Number(r.total),
      indexBytes: Number(r.indexes),
      bytesPerEvent: perEvent(Number(r.total)),
      indexBytesPerEvent: perEvent(Number(r.indexes)),
    })),
    indexes: indexes.rows.map((r) => ({ index: r.index, table: r.table, bytes: Number(r.bytes) })),
  };
}

const mb = (bytes: number) => round(bytes / 2 ** 20);

type Ratios = {
  loaded: number;
  commitP99: Record<string, number>;
  commitP50: Record<string, number>;
  streamThroughput: number;
  statusP99: number;
  statusP50: number;
  bytesPerEvent: number | null;
};

/** The absolute figures of a stage or of its anchor, in the order of FIGURE_HEADERS. */
const FIGURE_HEADERS = [
  ...Object.keys(COMMIT_ITERATIONS).flatMap((n) => [`commit ${n} p50 ms`, 'p99 ms']),
  'status p50 ms',
  'p99 ms',
  'e2e events/s',
  'e2e commit p50 ms',
  'p99 ms',
];
function figureCells({ commit, status, stream }: Pick<Stage, 'commit' | 'status' | 'stream'>): number[] {
  return [
    ...Object.keys(COMMIT_ITERATIONS).flatMap((n) => [commit[n]!.p50Ms, commit[n]!.p99Ms]),
    status.p50Ms,
    status.p99Ms,
    stream.eventsPerSecond,
    stream.commitP50Ms,
    stream.commitP99Ms,
  ];
}

/** The ratios of each stage to an empty database's figures, one row per stage. */
function ratioTable(ratios: Ratios[]): string[] {
  const sizes = Object.keys(COMMIT_ITERATIONS);
  return table(
    [
      'history loaded',
      ...sizes.map((n) => `commit p99 ×, ${n} ev`),
      ...sizes.map((n) => `commit p50 ×, ${n} ev`),
      'e2e throughput empty / this',
      'status p99 ×',
      'status p50 ×',
      'bytes on disk / receipt',
    ],
    ratios.map((r) => [
      r.loaded.toLocaleString('en-US'),
      ...sizes.map((n) => r.commitP99[n]!),
      ...sizes.map((n) => r.commitP50[n]!),
      r.streamThroughput,
      r.statusP99,
      r.statusP50,
      r.bytesPerEvent ?? '–',
    ]),
  );
}

/** An auto_explain NOTICE without its query text: the duration, then the plan from its top node. */
function planLines(notice: string): string[] {
  const lines = notice.split('\n');
  const top = lines.findIndex((l) => l.includes('(cost='));
  return [lines[0]!, ...(top < 0 ? [] : lines.slice(top))];
}

function writeAgeResults(
  ctx: BenchContext,
  stages: Stage[],
  settings: { name: string; setting: string; unit: string | null }[],
  start: MachineState,
  streamTransitions: number,
): void {
  const end = machineState();
  const ratio = (a: number, b: number) => round(a / b, 2);
  const targets = { commitP99: 1.25, streamThroughput: 1.25 };
  // Each stage against an empty database: its anchor, measured in the same seconds (the targets' figures), and the
  // empty stage, measured before any loading (what a run without anchors could compare with).
  const ratiosTo = (empty: (s: Stage) => Pick<Stage, 'commit' | 'status' | 'stream'>, from: Stage[]) =>
    from.map((s) => ({
      loaded: s.loaded,
      commitP99: Object.fromEntries(
        Object.entries(s.commit).map(([n, series]) => [n, ratio(series.p99Ms, empty(s).commit[n]!.p99Ms)]),
      ),
      commitP50: Object.fromEntries(
        Object.entries(s.commit).map(([n, series]) => [n, ratio(series.p50Ms, empty(s).commit[n]!.p50Ms)]),
      ),
      streamThroughput: ratio(empty(s).stream.eventsPerSecond, s.stream.eventsPerSecond),
      statusP99: ratio(s.status.p99Ms, empty(s).status.p99Ms),
      statusP50: ratio(s.status.p50Ms, empty(s).status.p50Ms),
      bytesPerEvent: s.receipts === 0 ? null : round(s.tables.reduce((a, t) => a + t.totalBytes, 0) / s.receipts),
    }));
  const ratios = ratiosTo((s) => s.anchor, stages);
  const ratiosToEmptyStage = ratiosTo(() => stages[0]!, stages.slice(1));
  const setting = (name: string) => {
    const row = settings.find((s) => s.name === name);
    return row ? `${row.setting}${row.unit ? ` × ${row.unit}` : ''}` : 'unknown';
  };
  const sizes = Object.keys(stages[0]!.commit);
  const json = {
    bench: 'age',
    tree: ctx.after.commit,
    start,
    end,
    postgres: Object.fromEntries(settings.map((s) => [s.name, s.unit ? `${s.setting} ${s.unit}` : s.setting])),
    targets,
    streamJournal: { seed: SEED, transitions: streamTransitions, checkpointEvery: CHECKPOINT_EVERY },
    ratios,
    ratiosToEmptyStage,
    stages,
  };
  const cpu = end.cpuModel;
  writeResults('age', json, [
    `# age benchmark (${end.at})`,
    '',
    describeMachine(start, end),
    `Postgres ${setting('server_version')}, shared_buffers ${setting('shared_buffers')} (the shared server's, unchanged),`,
    `effective_cache_size ${setting('effective_cache_size')}; ${end.memoryGb} GB of RAM, the rest the OS page cache. Tree ${ctx.after.commit}.`,
    '',
    'One scratch database, migrated by this tree, grows stage by stage; each stage loads its history in SQL with every',
    'index in place, runs VACUUM ANALYZE and a CHECKPOINT, then measures the consumer that has aged. Beside it, each',
    'stage measures an anchor: a fresh database with nothing loaded, sample for sample in the same seconds (the two',
    'taking turns), so that a machine slowing down for a while slows both. Ratios are against the anchor; the row at',
    '0 loaded compares two empty databases, the noise to read the others with. Targets: commit p99 at the largest',
    `stage / its anchor <= ${targets.commitP99}, e2e throughput anchor / largest stage <= ${targets.streamThroughput}.`,
    '',
    ...ratioTable(ratios),
    '',
    'Against the empty stage instead (measured before anything was loaded, minutes to an hour earlier: the machine',
    'may have changed in between):',
    '',
    ...ratioTable(ratiosToEmptyStage),
    '',
    '## What each stage holds',
    '',
    `Receipts of five consumers sharing one journal (two events a position), in blocks of 1,000: four fifths the`,
    `measured consumer's (\`${AGED}\`), a fifth four others'. Of the events, 90% are trades (an execution each), 5%`,
    'corrections of the trade before them (its first revision moved to execution_revisions), 5% apply nothing; 2% are',
    "whale alerts in the outbox, nine in ten suppressed as replayed, the rest sent. Event ids in the simulator's format",
    `(\`ev-a6e-0000001\`), content hashes \`v2:\` + 64 hex. Every position loaded is below what the measurement commits;`,
    "every entity id (`old-…`) sorts below the stream's (`trade-…`), as an older part of one feed's sequential ids would.",
    '',
    '## How each stage is measured',
    '',
    `- commit: commitCheckpoint of ${sizes.join(', ')} new events per checkpoint by \`${AGED}\`, resuming its saved`,
    `  checkpoint (${Object.values(COMMIT_ITERATIONS).join(', ')} samples after ${WARMUP} unmeasured, the sizes interleaved, each sample`,
    '  taken on the aged database and on the anchor one after the other, which first alternating), every tenth event',
    '  a whale (bench/fixtures.ts freshCheckpoints).',
    `- status: consumerSummary of \`${AGED}\` and retentionView (what \`status\` reads from the database, cli/consumers.ts), ${STATUS_SAMPLES} calls after ${STATUS_WARMUP}`,
    `  unmeasured (fewer once they have taken ${STATUS_BUDGET_MS / 1000} s: samples per stage ${stages.map((s) => s.status.samples).join(', ')}), after the`,
    "  commits (a status read among them would evict their pages), taking turns with the anchor's.",
    `- e2e: consumeStream (bench/stream-run.ts, a process of its own) replays the reference server's journal (seed ${SEED},`,
    `  ${streamTransitions.toLocaleString('en-US')} transitions, checkpoint every ${CHECKPOINT_EVERY}, renumbered above every loaded position) as \`${AGED}\` after an`,
    `  operator's from_floor decision, ${STREAM_ROUNDS} runs per stage and as many on the anchor (taking turns), the previous`,
    "  replay's rows deleted before each: events/s is the median run, from the first connection to the cut committed.",
    '- bytes: pg_total_relation_size (heap, TOAST and indexes) and pg_indexes_size of each table over the receipts of',
    "  every consumer, after the stage's VACUUM ANALYZE and before its measurement.",
    '',
    `## Absolute figures (${cpu})`,
    '',
    ...table(
      ['history loaded', 'receipts', 'load s', ...FIGURE_HEADERS, 'load avg at end'],
      stages.map((s) => [
        s.loaded.toLocaleString('en-US'),
        s.receipts.toLocaleString('en-US'),
        s.loadSeconds,
        ...figureCells(s),
        s.machine.loadavg.join(' '),
      ]),
    ),
    '',
    "Each stage's anchor (an empty database, measured beside it):",
    '',
    ...table(
      ['stage', ...FIGURE_HEADERS],
      stages.map((s) => [s.loaded.toLocaleString('en-US'), ...figureCells(s.anchor)]),
    ),
    '',
    '## Bytes on disk per receipt',
    '',
    ...table(
      [
        'table',
        ...stages
          .slice(1)
          .flatMap((s) => [`${s.receipts.toLocaleString('en-US')}: MB`, 'B/receipt', 'indexes B/receipt']),
      ],
      stages.at(-1)!.tables.map((t) => [
        t.table,
        ...stages.slice(1).flatMap((s) => {
          const at = s.tables.find((x) => x.table === t.table)!;
          return [mb(at.totalBytes), at.bytesPerEvent ?? '–', at.indexBytesPerEvent ?? '–'];
        }),
      ]),
    ),
    '',
    `## Blocks per 1,000 committed events over the commit measurement (read: not in shared_buffers)`,
    '',
    ...table(
      ['relation', ...stages.flatMap((s) => [`${s.loaded.toLocaleString('en-US')}: read`, 'hit'])],
      stages
        .at(-1)!
        .buffers.slice(0, 16)
        .map((b) => [
          b.relation,
          ...stages.flatMap((s) => {
            const at = s.buffers.find((x) => x.relation === b.relation);
            return [at?.readPer1000Events ?? 0, at?.hitPer1000Events ?? 0];
          }),
        ]),
    ),
    '',
    `## The commit statements at ${stages.at(-1)!.loaded.toLocaleString('en-US')} loaded (auto_explain: ANALYZE, BUFFERS)`,
    '',
    ...Object.entries(stages.at(-1)!.commitPlans).flatMap(([size, notices]) => [
      `${size} events:`,
      '',
      '```',
      ...notices.flatMap(planLines),
      '```',
      '',
    ]),
    `## Indexes at ${stages.at(-1)!.receipts.toLocaleString('en-US')} receipts, against shared_buffers ${setting('shared_buffers')}`,
    '',
    ...table(
      ['index', 'table', 'MB'],
      stages
        .at(-1)!
        .indexes.filter((i) => i.bytes >= 2 ** 20)
        .map((i) => [i.index, i.table, mb(i.bytes)]),
    ),
    '',
  ]);
}
