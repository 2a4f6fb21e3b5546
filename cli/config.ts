// What the operator commands need from the environment: where Temporal is (the same settings and profile file
// as the `temporal` CLI), and (for status) the database. Unlike the worker they never need the stream URL or
// its API key.
import { userInfo } from 'node:os';
import { z } from 'zod';
import { loadTemporalSettings, TemporalSettingsError, type TemporalSettings } from '../worker/temporal-connection.js';
import { TASK_QUEUE } from '../workflows/definitions.js';
import { CliError } from './errors.js';

export interface CliConfig {
  temporal: TemporalSettings;
  taskQueue: string;
  /** null: status shows the workflow's view only. */
  databaseUrl: string | null;
}

const optional = z
  .string()
  .trim()
  .optional()
  .transform((s) => (s === '' ? undefined : s));

const envSchema = z.object({
  TASK_QUEUE: optional.transform((s) => s ?? TASK_QUEUE),
  DATABASE_URL: optional.pipe(
    z
      .string()
      .refine((s) => /^postgres(ql)?:\/\//.test(s) && URL.canParse(s), 'must be a postgres:// URL')
      .optional(),
  ),
});

export function loadCliConfig(env: NodeJS.ProcessEnv): CliConfig {
  const parsed = envSchema.safeParse(env);
  const problems = parsed.success
    ? []
    : parsed.error.issues.map((issue) => `${String(issue.path[0])}: ${issue.message}`);
  let temporal: TemporalSettings | null = null;
  try {
    temporal = loadTemporalSettings(env);
  } catch (error) {
    if (!(error instanceof TemporalSettingsError)) throw error;
    problems.push(...error.problems.map((p) => `${p.variable}: ${p.problem}`));
  }
  if (!parsed.success || temporal === null) {
    throw new CliError('config_invalid', `invalid configuration: ${problems.join('; ')}`);
  }
  const e = parsed.data;
  return {
    temporal,
    taskQueue: e.TASK_QUEUE,
    databaseUrl: e.DATABASE_URL ?? null,
  };
}

/**
 * Who an audited command is recorded as without --actor: the OS user running it, so the printed commands work where
 * USER is unset (cron, containers, CI). USER and LOGNAME where the uid has no account name (a container's arbitrary
 * uid), then `uid <n>`; null where not even that is known (--actor is then required).
 */
export function defaultActor(
  env: NodeJS.ProcessEnv,
  account: () => { username: string; uid: number } = userInfo,
): string | null {
  let uid: number | null = null;
  try {
    const user = account();
    if (user.username.trim() !== '') return user.username;
    uid = user.uid;
  } catch {
    // No passwd entry for this uid: the environment may still name the user.
  }
  const named = [env.USER, env.LOGNAME].find((name) => name !== undefined && name.trim() !== '');
  if (named !== undefined) return named;
  const id = uid ?? process.getuid?.() ?? -1;
  return id >= 0 ? `uid ${id}` : null;
}
