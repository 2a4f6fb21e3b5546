// What the operator commands need from the environment: where Temporal is, and (for status) the database.
// Unlike the worker they never need the stream URL or its API key.
import { z } from 'zod';
import { TASK_QUEUE } from '../workflows/definitions.js';
import { CliError } from './errors.js';

export interface CliConfig {
  temporal: { address: string; namespace: string };
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
  TEMPORAL_ADDRESS: optional.transform((s) => s ?? '127.0.0.1:7233'),
  TEMPORAL_NAMESPACE: optional.transform((s) => s ?? 'default'),
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
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `${String(issue.path[0])}: ${issue.message}`);
    throw new CliError('config_invalid', `invalid configuration: ${problems.join('; ')}`);
  }
  const e = parsed.data;
  return {
    temporal: { address: e.TEMPORAL_ADDRESS, namespace: e.TEMPORAL_NAMESPACE },
    taskQueue: e.TASK_QUEUE,
    databaseUrl: e.DATABASE_URL ?? null,
  };
}
