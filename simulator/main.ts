// The reference stream server as a process:
//   npx tsx simulator/main.ts --port 8787 --seed 42 --transitions 2000 --live-rate 5 --api-key dev-key \
//     [--journal f.jsonl] [faults]
// With --journal, an existing file is loaded; a missing one is generated from the seed and written there.
import { access } from 'node:fs/promises';
import { pagePath } from '../protocol/codec.js';
import { Journal } from './journal.js';
import {
  SIMULATOR_USAGE,
  SimulatorUsageError,
  parseSimulatorArgs,
  wantsHelp,
  type SimulatorConfig,
} from './options.js';
import { ReferenceStreamServer } from './server.js';

async function loadJournal(config: SimulatorConfig): Promise<Journal> {
  if (config.journalFile) {
    const exists = await access(config.journalFile).then(
      () => true,
      () => false,
    );
    if (exists) return Journal.load(config.journalFile);
  }
  const journal = Journal.generate({
    seed: config.seed,
    transitions: config.transitions,
    cachedRuns: config.cachedRuns,
  });
  if (config.journalFile) await journal.save(config.journalFile);
  return journal;
}

async function main(): Promise<void> {
  if (wantsHelp(process.argv.slice(2))) {
    process.stdout.write(SIMULATOR_USAGE);
    return;
  }
  let config: SimulatorConfig;
  try {
    config = parseSimulatorArgs(process.argv.slice(2));
  } catch (err) {
    if (err instanceof SimulatorUsageError) {
      process.stderr.write(`simulator: ${err.message}\nsee: simulator --help\n`);
      process.exit(2);
    }
    throw err;
  }
  const journal = await loadJournal(config);
  const server = await ReferenceStreamServer.start({
    journal,
    apiKeys: config.apiKeys,
    port: config.port,
    host: config.host,
    stream: config.stream,
    checkpointEvery: config.checkpointEvery,
    liveCheckpointEvery: config.liveCheckpointEvery,
    liveCheckpointIntervalMs: config.liveCheckpointIntervalMs,
    maxUnackedCheckpoints: config.maxUnackedCheckpoints,
    slowConsumerGraceMs: config.slowConsumerGraceMs,
    maxFrameBytes: config.maxFrameBytes,
    tokenSecret: config.tokenSecret,
    liveAppendRate: config.liveRate,
    faults: config.faults,
  }).catch((err: unknown) => {
    // One line naming the port and the way out, not the listen stack trace.
    if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE') {
      throw new Error(
        `port ${config.port} on ${config.host} is already in use; pick another with --port N (0: a free one)`,
      );
    }
    throw err;
  });
  const { id, floor, head } = journal.history;
  process.stdout.write(`whalehunt simulator: history ${id} floor ${floor} head ${head}\n`);
  process.stdout.write(`ws   ${server.url}\nhttp ${server.httpUrl}${pagePath(config.stream)}\n`);
  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) return;
    stopping = true;
    process.stdout.write(`whalehunt simulator: ${signal}, closing\n`);
    server.close().then(
      () => process.exit(0),
      (err: unknown) => {
        process.stderr.write(`simulator: close failed: ${err instanceof Error ? err.message : String(err)}\n`);
        process.exit(1);
      },
    );
  };
  process.once('SIGINT', () => stop('SIGINT'));
  process.once('SIGTERM', () => stop('SIGTERM'));
}

main().catch((err: unknown) => {
  process.stderr.write(`simulator: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
