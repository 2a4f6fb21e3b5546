// The worker process's own surface: `--help` without any configuration, README's list of its variables, LOG_FORMAT,
// METRICS_PORT parsing and the pretty log lines (redacted like the JSON ones).
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { CONFIG_VARIABLES, ConfigError, loadConfig } from '../../worker/config.js';
import { JsonLogger } from '../../worker/logger.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
/** The environment variable names a text mentions. */
const variablesNamedIn = (text: string) => new Set(text.match(/\b[A-Z][A-Z0-9_]+[A-Z0-9]\b/g));

const base = {
  DATABASE_URL: 'postgres://u@127.0.0.1/db',
  WHALEHUNT_URL: 'ws://127.0.0.1:1/stream',
  WHALEHUNT_API_KEY: 'key-1234',
};

describe('worker --help', () => {
  it('prints help and exits 0 with no configuration at all', () => {
    const env = { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '' };
    const run = spawnSync(process.execPath, ['--import', 'tsx', join(root, 'worker/main.ts'), '--help'], {
      cwd: root,
      env,
      encoding: 'utf8',
    });
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
    expect(run.stdout).toContain('Usage: npm run worker');
    // Every variable the configuration reads, the Temporal connection's included (TLS, API key, profile).
    const temporal = [
      'TEMPORAL_ADDRESS',
      'TEMPORAL_NAMESPACE',
      'TEMPORAL_API_KEY',
      'TEMPORAL_TLS',
      'TEMPORAL_TLS_SERVER_CA_CERT_PATH',
      'TEMPORAL_TLS_SERVER_CA_CERT_DATA',
      'TEMPORAL_TLS_CLIENT_CERT_PATH',
      'TEMPORAL_TLS_CLIENT_CERT_DATA',
      'TEMPORAL_TLS_CLIENT_KEY_PATH',
      'TEMPORAL_TLS_CLIENT_KEY_DATA',
      'TEMPORAL_TLS_SERVER_NAME',
      'TEMPORAL_PROFILE',
      'TEMPORAL_CONFIG_FILE',
    ];
    const listed = variablesNamedIn(run.stdout);
    const missing = [...CONFIG_VARIABLES, ...temporal, 'WORKFLOW_BUNDLE_PATH'].filter((name) => !listed.has(name));
    expect(missing).toEqual([]);
    expect(CONFIG_VARIABLES).toEqual(expect.arrayContaining(['DATABASE_POOL_SIZE', 'MAX_CONCURRENT_ACTIVITIES']));
  });
});

describe("README's Environment section", () => {
  it('names every variable the worker reads', () => {
    const readme = readFileSync(join(root, 'README.md'), 'utf8');
    const start = readme.indexOf('\n## Environment\n');
    expect(start).toBeGreaterThan(0);
    const named = variablesNamedIn(readme.slice(start, readme.indexOf('\n## ', start + 1)));
    expect(CONFIG_VARIABLES.filter((name) => !named.has(name))).toEqual([]);
  });
});

describe('LOG_FORMAT and METRICS_PORT', () => {
  it('default to JSON logs and no endpoint', () => {
    const config = loadConfig(base);
    expect(config.logFormat).toBe('json');
    expect(config.metrics).toBeNull();
  });

  it('parse pretty logs and a port with its host', () => {
    const config = loadConfig({ ...base, LOG_FORMAT: 'Pretty', METRICS_PORT: '9464', METRICS_HOST: '127.0.0.1' });
    expect(config.logFormat).toBe('pretty');
    expect(config.metrics).toEqual({ port: 9464, host: '127.0.0.1' });
    expect(loadConfig({ ...base, METRICS_PORT: '0' }).metrics).toEqual({ port: 0, host: '0.0.0.0' });
  });

  it('name both variables when invalid', () => {
    let error: unknown;
    try {
      loadConfig({ ...base, LOG_FORMAT: 'xml', METRICS_PORT: '70000' });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).problems.map((p) => p.variable).sort()).toEqual(['LOG_FORMAT', 'METRICS_PORT']);
  });
});

describe('MAINTENANCE_EVERY, OUTBOX_RETENTION_DAYS and REVISION_RETENTION_DAYS', () => {
  it('default to an hourly schedule, alerts kept 30 days and every revision kept', () => {
    const config = loadConfig(base);
    expect(config.maintenance).toEqual({ every: '1h' });
    expect(config.retention).toMatchObject({ outboxDays: 30, revisionDays: null });
  });

  it('parse an interval or off, and days or off', () => {
    const config = loadConfig({
      ...base,
      MAINTENANCE_EVERY: '30m',
      OUTBOX_RETENTION_DAYS: 'OFF',
      REVISION_RETENTION_DAYS: '90',
    });
    expect(config.maintenance).toEqual({ every: '30m' });
    expect(config.retention).toMatchObject({ outboxDays: null, revisionDays: 90 });
    expect(loadConfig({ ...base, MAINTENANCE_EVERY: 'off' }).maintenance).toBeNull();
    expect(loadConfig({ ...base, MAINTENANCE_EVERY: '1d' }).maintenance).toEqual({ every: '1d' });
  });

  it('name each invalid variable', () => {
    let error: unknown;
    try {
      loadConfig({ ...base, MAINTENANCE_EVERY: '0h', OUTBOX_RETENTION_DAYS: '0', REVISION_RETENTION_DAYS: '2w' });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).problems).toEqual([
      { variable: 'MAINTENANCE_EVERY', problem: 'must be above 0, or off' },
      { variable: 'OUTBOX_RETENTION_DAYS', problem: 'must be at least 1 day, or off' },
      { variable: 'REVISION_RETENTION_DAYS', problem: 'must be a number of days (at least 1) or off' },
    ]);
    expect(() => loadConfig({ ...base, MAINTENANCE_EVERY: '90' })).toThrow(
      'MAINTENANCE_EVERY: must be an interval such as 30m, 1h or 1d, or off',
    );
  });
});

describe('pretty log lines', () => {
  it('read as time, level, message and key=value fields, with secrets redacted', () => {
    const lines: string[] = [];
    const log = new JsonLogger({
      format: 'pretty',
      secrets: ['sk-very-secret'],
      bindings: { service: 'w' },
      write: (line) => lines.push(line),
      now: () => new Date('2025-01-02T03:04:05.000Z'),
    });
    log.child({ component: 'activities' }).info('lease started', {
      consumerId: 'c1',
      position: 7,
      apiKey: 'anything',
      note: 'has sk-very-secret inside',
    });
    expect(lines).toEqual([
      '2025-01-02T03:04:05.000Z INFO  lease started service="w" component="activities" consumerId="c1" position=7 apiKey="[REDACTED]" note="has [REDACTED] inside"\n',
    ]);
  });
});
