#!/usr/bin/env node
// `whalehunt-consumer <command>`: parse, run, exit. Exit codes: 0 done, 1 the command failed (unknown
// consumer, rejected decision, unreachable service, a backfill stop that needs an operator, an alerts retry or
// drop that matched nothing: the message names it), 2 a usage or configuration error, 130 a backfill
// interrupted by Ctrl-C (resumable).
import { spawn } from 'node:child_process';
import { exitIfStaleBuild, nodeEntryArgs } from '../worker/build-info.js';
import { isEntryPoint } from '../worker/entry-point.js';
import { CliUsageError, commandHelp, generalHelp, parseCommand, type CliCommand } from './args.js';
import {
  listAlerts,
  listConsumers,
  moveAlerts,
  pauseOrResume,
  rebind,
  resolveQuarantine,
  resolveStop,
  scheduleRebind,
  showStatus,
  startConsumer,
  type CommandIo,
} from './commands.js';
import { runBackfillWorkflow } from './backfill-workflow.js';
import { runMaintenanceNow } from './maintenance.js';
import { defaultActor, loadCliConfig } from './config.js';
import { connectTemporal } from './consumers.js';
import { CliError } from './errors.js';
import { createPool } from '../db/connect.js';

export const EXIT_OK = 0;
export const EXIT_FAILED = 1;
export const EXIT_USAGE = 2;

export interface CliIo extends CommandIo {
  err(text: string): void;
}

const processIo: CliIo = {
  out: (text) => void process.stdout.write(`${text}\n`),
  err: (text) => void process.stderr.write(`${text}\n`),
};

export async function main(
  argv: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
  io: CliIo = processIo,
): Promise<number> {
  let command: CliCommand;
  try {
    command = parseCommand(argv, { actor: defaultActor(env) });
  } catch (error) {
    if (!(error instanceof CliUsageError)) throw error;
    io.err(`error: ${error.message}`);
    io.err(error.command ? `see: whalehunt-consumer ${error.command} --help` : 'see: whalehunt-consumer --help');
    return EXIT_USAGE;
  }

  try {
    return await execute(command, env, io);
  } catch (error) {
    if (error instanceof CliError) {
      io.err(`error (${error.code}): ${error.message}`);
      return error.code === 'config_invalid' ? EXIT_USAGE : EXIT_FAILED;
    }
    io.err(`error: ${unexpectedError(error)}`);
    return EXIT_FAILED;
  }
}

/** The message and its cause's: a server refusal (e.g. an unregistered search attribute) says why in the cause. */
function unexpectedError(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  return error.cause instanceof Error ? `${error.message}: ${error.cause.message}` : error.message;
}

async function execute(command: CliCommand, env: NodeJS.ProcessEnv, io: CliIo): Promise<number> {
  switch (command.command) {
    case 'help':
      io.out(command.topic ? commandHelp(command.topic) : generalHelp());
      return EXIT_OK;
    case 'sim':
      return runSimulator(command.args);
    case 'run':
      // Loaded on demand, like backfill --direct: the main job's worker SDK and the page consumer's activities are
      // most of a CLI call's start-up, and the other commands need none of them.
      return (await import('./run.js')).runMainJob(command, env, io);
    // backfill --direct and backfill-status need no Temporal: they talk to the source and the database directly.
    case 'backfill':
      return command.direct
        ? (await import('./backfill.js')).runBackfill(command, env, io)
        : runBackfillWorkflow(command, env, io);
    case 'backfill-status':
      return (await import('./backfill.js')).showBackfillStatus(command, env, io);
    case 'alerts':
      return runAlerts(command, env, io);
    default:
      break;
  }

  const config = loadCliConfig(env);
  const session = await connectTemporal(config);
  try {
    switch (command.command) {
      case 'start':
        await startConsumer(session, command, io);
        break;
      case 'status': {
        const pool = config.databaseUrl ? createPool(config.databaseUrl, { max: 1 }) : null;
        try {
          await showStatus(session, pool, command, io);
        } finally {
          await pool?.end();
        }
        break;
      }
      case 'resolve-gap':
      case 'resolve-binding':
        await resolveStop(session, command, io);
        break;
      case 'resolve-quarantine':
        await resolveQuarantine(session, command, io);
        break;
      case 'rebind':
        await rebind(session, command, io);
        break;
      case 'schedule-rebind':
        await scheduleRebind(session, command, io);
        break;
      case 'pause':
      case 'resume':
        await pauseOrResume(session, command, io);
        break;
      case 'list':
        await listConsumers(session, command, io);
        break;
      case 'maintenance':
        await runMaintenanceNow(session, command, io);
        break;
    }
    return EXIT_OK;
  } finally {
    await session.close();
  }
}

/** `alerts` reads and changes the outbox in the database: DATABASE_URL only, like backfill-status. */
async function runAlerts(
  command: Extract<CliCommand, { command: 'alerts' }>,
  env: NodeJS.ProcessEnv,
  io: CliIo,
): Promise<number> {
  const { databaseUrl } = loadCliConfig(env);
  if (!databaseUrl) throw new CliError('config_invalid', 'alerts reads the database: set DATABASE_URL');
  const pool = createPool(databaseUrl, { max: 1 });
  try {
    if (command.action === 'list') await listAlerts(pool, command, io);
    else await moveAlerts(pool, command, io);
    return EXIT_OK;
  } finally {
    await pool.end();
  }
}

/** `sim` is the simulator's own entry point, run as a child so its flags and signals stay its own. */
function runSimulator(args: string[]): Promise<number> {
  return new Promise((resolveExit) => {
    const child = spawn(process.execPath, [...nodeEntryArgs('simulator/main'), ...args], { stdio: 'inherit' });
    // The terminal's Ctrl-C reaches the child directly (same process group): outlive it. A SIGTERM is
    // addressed to this process alone (a service manager), so pass it on.
    const ignore = (): void => undefined;
    const forward = (): void => void child.kill('SIGTERM');
    process.on('SIGINT', ignore);
    process.on('SIGTERM', forward);
    child.once('error', (error) => {
      process.stderr.write(`error: could not start the simulator: ${error.message}\n`);
      resolveExit(EXIT_FAILED);
    });
    child.once('exit', (code, signal) => {
      process.off('SIGINT', ignore);
      process.off('SIGTERM', forward);
      resolveExit(code ?? (signal ? EXIT_FAILED : EXIT_OK));
    });
  });
}

if (isEntryPoint(import.meta.url)) {
  exitIfStaleBuild('whalehunt-consumer');
  main(process.argv.slice(2)).then(
    // Exit explicitly: native Temporal handles must not keep a finished command alive.
    (code) => process.exit(code),
    (error: unknown) => {
      process.stderr.write(`error: ${error instanceof Error ? error.message : String(error)}\n`);
      process.exit(EXIT_FAILED);
    },
  );
}
