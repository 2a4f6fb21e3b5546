// `backfill` and `backfill-status`: the paginated history source run by an operator, straight against the
// configured source and database (no Temporal, no worker). The page consumer's progress row is the only
// state, so a run stopped anywhere (Ctrl-C, a crash, --max-pages) resumes from the saved cursor next time.
import { canonicalJson } from '../protocol/canonical.js';
import { formatCount } from '../protocol/progress.js';
import { redactSecret } from '../protocol/redact.js';
import { consumePages, type PageHeartbeat, type PageOutcome } from '../activities/page-consumer.js';
import { pageConsumerConfig, poolPageStore } from '../activities/index.js';
import { createPool, migrate } from '../db/index.js';
import { loadPageEventsApplied, loadPageProgress } from '../db/pages.js';
import { ConfigError, loadConfig, type WorkerConfig } from '../worker/config.js';
import { onShutdownSignal } from '../worker/shutdown-signal.js';
import type { CliCommand } from './args.js';
import { loadCliConfig } from './config.js';
import { CliError } from './errors.js';

export interface BackfillIo {
  out(text: string): void;
  err(text: string): void;
}

/** Outcomes that are a normal end of a run: exit 0. Every other stop needs an operator: exit 1. */
const DONE_KINDS: ReadonlySet<PageOutcome['kind']> = new Set(['target_reached', 'caught_up', 'page_limit']);
export const EXIT_INTERRUPTED = 130;

type BackfillCommand = Extract<CliCommand, { command: 'backfill' }>;
type BackfillStatusCommand = Extract<CliCommand, { command: 'backfill-status' }>;

export async function runBackfill(cmd: BackfillCommand, env: NodeJS.ProcessEnv, io: BackfillIo): Promise<number> {
  const config = loadWorkerConfig(env);
  const apiKey = config.stream.apiKey;
  // Belt and braces: nothing this command prints may carry the API key.
  const scrub = (text: string): string => redactSecret(text, apiKey);
  const say = (text: string): void => io.out(scrub(text));
  const warn = (text: string): void => io.err(scrub(text));
  const logLine = (level: string) => (msg: string, fields?: Record<string, unknown>) =>
    warn(`${level}: ${msg}${fields ? ` ${JSON.stringify(fields)}` : ''}`);

  const abort = new AbortController();
  const offShutdownSignal = onShutdownSignal({
    graceful: (signal) => {
      warn(`\n${signal}: stopping after the current chunk (Ctrl-C again to exit at once)`);
      abort.abort();
    },
    forced: (signal) => {
      warn(`${signal} again: exiting now (the next run resumes from the last committed chunk)`);
      process.exit(EXIT_INTERRUPTED);
    },
  });

  const pool = createPool(config.databaseUrl, { max: 2 });
  try {
    await migrate(pool);
    const before = await loadPageProgress(pool, cmd.consumerId);
    say(
      before
        ? `backfill ${cmd.consumerId}: resuming at applied position ${before.appliedPosition} (version ${before.version})`
        : `backfill ${cmd.consumerId}: first run, from the retention floor of stream ${config.pages.stream}`,
    );
    let lastPages = -1;
    let lastChunks = -1;
    let announcedTarget = false;
    const heartbeat = ({ appliedPosition, version, counters, target }: PageHeartbeat): void => {
      if (target && !announcedTarget) {
        announcedTarget = true;
        say(
          `  target ${formatCount(target.position)} (${cmd.until === undefined ? "the source's head at the first page" : 'given with --until'}; history ${target.historyId})`,
        );
      }
      // Heartbeats also come while backing off; print only when a page or chunk landed.
      if (counters.pages === lastPages && counters.chunks === lastChunks) return;
      lastPages = counters.pages;
      lastChunks = counters.chunks;
      const of = target ? ` of ${formatCount(target.position)}` : '';
      say(
        `  pages ${counters.pages}  chunks ${counters.chunks}  applied position ${formatCount(appliedPosition)}${of}  version ${version}  new ${counters.applied}  recognised ${counters.recognised}`,
      );
    };
    const outcome = await consumePages(
      {
        store: poolPageStore(pool),
        config: pageConsumerConfig(config),
        log: { info: () => undefined, warn: logLine('warn'), error: logLine('error') },
      },
      {
        consumerId: cmd.consumerId,
        filter: cmd.filter,
        ...(cmd.maxPages === undefined ? {} : { maxPages: cmd.maxPages }),
        // A target fixed when the run starts: the source's head at its first page, or --until.
        target: cmd.until === undefined ? 'head' : { position: cmd.until, historyId: null },
      },
      { heartbeat, signal: abort.signal },
    );
    const { counters, progress } = outcome;
    say(describeOutcome(outcome));
    say(
      `  applied position ${formatCount(progress.appliedPosition)}  version ${progress.version}  requests ${counters.requests}  pages ${counters.pages}` +
        `  new ${counters.applied}  recognised ${counters.recognised}  duplicates ${counters.duplicates}  no effect ${counters.noEffect}  quarantined ${counters.quarantined}`,
    );
    if (DONE_KINDS.has(outcome.kind)) return 0;
    return outcome.kind === 'cancelled' ? EXIT_INTERRUPTED : 1;
  } catch (error) {
    if (error instanceof CliError) throw error;
    const message = error instanceof Error ? error.message : String(error);
    const code = (error as { code?: unknown }).code;
    throw new CliError(
      'backfill_failed',
      scrub(`backfill ${cmd.consumerId} failed${typeof code === 'string' ? ` (${code})` : ''}: ${message}`),
      { cause: error },
    );
  } finally {
    offShutdownSignal();
    await pool.end();
  }
}

/** One line naming the outcome and, for a stop, what the operator has to look at. */
export function describeOutcome(outcome: PageOutcome): string {
  switch (outcome.kind) {
    case 'target_reached': {
      const target = outcome.target ? formatCount(outcome.target.position) : '?';
      return outcome.by === 'applied'
        ? `reached the target ${target}: applied position ${formatCount(outcome.progress.appliedPosition)}`
        : `reached the target ${target}: the source's head ${formatCount(outcome.sourceHistory?.head)} is at or past it and holds nothing new for this filter`;
    }
    case 'caught_up':
      return outcome.target
        ? `caught up below the target: the source's head ${formatCount(outcome.sourceHistory?.head)} has not reached ${formatCount(outcome.target.position)} yet; run again later to continue`
        : `caught up: the source has nothing new after ${outcome.attempts} repeated request(s)`;
    case 'page_limit':
      return 'page limit reached: run again to continue from the saved cursor';
    case 'cancelled':
      return 'interrupted: stopped at a chunk boundary; run again to continue from the saved cursor';
    case 'non_advancing':
      return `stopped (non_advancing), needs an operator: the source kept repeating the same cursor with events after ${outcome.attempts} attempts; nothing of that page was applied`;
    case 'reset':
      return `stopped (reset: ${outcome.reason}), needs an operator: the source no longer serves the saved cursor (history ${outcome.history.id}); the cursor is kept`;
    case 'conflict':
      return `stopped (conflict), needs an operator: event ${outcome.eventId} arrived with content hash ${outcome.incomingHash}, the saved one has ${outcome.savedHash}`;
    case 'unrecognised_event':
      return `stopped (unrecognised_event), needs an operator: event ${outcome.eventId} at position ${outcome.position} is inside the applied prefix but was never applied; the source's past changed`;
    case 'held_quarantine':
      return `stopped (held_quarantine), needs an operator: ${outcome.items.length} held event(s): ${outcome.items.map((item) => `${item.eventId} (${item.reason})`).join(', ')}`;
    case 'fenced':
      return `stopped (fenced): another run moved this consumer's progress (version ${outcome.actualVersion ?? 'none'}); make sure only one backfill runs per consumer`;
    case 'binding_mismatch':
      return `stopped (binding_mismatch), needs an operator: ${outcome.message}`;
    case 'source_failed':
      return `stopped (source_failed: ${outcome.code}${outcome.status === null ? '' : `, HTTP ${outcome.status}`}), ${outcome.retryable ? 'still failing after the backoff; run again later' : 'needs an operator'}: ${outcome.message}`;
  }
}

export async function showBackfillStatus(
  cmd: BackfillStatusCommand,
  env: NodeJS.ProcessEnv,
  io: BackfillIo,
): Promise<number> {
  const { databaseUrl } = loadCliConfig(env);
  if (!databaseUrl) throw new CliError('config_invalid', 'backfill-status reads the database: set DATABASE_URL');
  const pool = createPool(databaseUrl, { max: 1 });
  try {
    const [progress, eventsApplied] = await Promise.all([
      loadPageProgress(pool, cmd.consumerId),
      loadPageEventsApplied(pool, cmd.consumerId),
    ]).catch((cause: unknown) => {
      throw new CliError(
        'database_unavailable',
        `could not read page progress: ${cause instanceof Error ? cause.message : String(cause)}`,
        { cause },
      );
    });
    if (!progress)
      throw new CliError('unknown_consumer', `no page consumer ${cmd.consumerId} (it has never run a backfill)`);
    if (cmd.json) {
      io.out(JSON.stringify({ ...progress, eventsApplied }));
      return 0;
    }
    io.out(
      [
        `page consumer ${progress.consumerId}`,
        `  stream            ${progress.stream}  history ${progress.historyId ?? '(none yet)'}`,
        `  filter            ${canonicalJson(progress.filter)}`,
        `  applied position  ${progress.appliedPosition}`,
        ...(eventsApplied === null ? [] : [`  events applied    ${formatCount(eventsApplied)}`]),
        `  version           ${progress.version}`,
        `  resume cursor     ${progress.resumeCursor === null ? 'none: the next run starts at the retention floor' : 'saved: the next run continues from it'}`,
      ].join('\n'),
    );
    return 0;
  } finally {
    await pool.end();
  }
}

function loadWorkerConfig(env: NodeJS.ProcessEnv): WorkerConfig {
  try {
    return loadConfig(env);
  } catch (error) {
    // ConfigError names variables, never values.
    if (error instanceof ConfigError) throw new CliError('config_invalid', error.message, { cause: error });
    throw error;
  }
}
