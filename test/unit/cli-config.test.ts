// Configuration errors of the operator CLI and the worker process: named variables, exit code 2, never a value.
import { execFile } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { loadCliConfig } from '../../cli/config.js';
import { CliError } from '../../cli/errors.js';
import { main } from '../../cli/main.js';
import { ConfigError } from '../../worker/config.js';
import { parseCrashAt } from '../../worker/main.js';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

function captureIo() {
  const out: string[] = [];
  const err: string[] = [];
  return { io: { out: (t: string) => void out.push(t), err: (t: string) => void err.push(t) }, out, err };
}

describe('CLI configuration', () => {
  it('defaults to a local Temporal and no database', () => {
    const config = loadCliConfig({});
    expect(config).toMatchObject({ taskQueue: 'whalehunt-consumer', databaseUrl: null });
    expect(config.temporal.summary).toEqual({
      address: '127.0.0.1:7233',
      namespace: 'default',
      profile: null,
      tls: 'off',
      apiKeySet: false,
      tlsSettings: {},
    });
  });

  it('names a malformed DATABASE_URL without echoing it', () => {
    const url = 'mysql://root:hunter2@db/x';
    let caught: unknown;
    try {
      loadCliConfig({ DATABASE_URL: url });
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(CliError);
    expect((caught as CliError).code).toBe('config_invalid');
    expect((caught as CliError).message).toBe('invalid configuration: DATABASE_URL: must be a postgres:// URL');
  });

  it("exits 2 with the command's help pointer on a usage error, and 0 with help text", async () => {
    const bad = captureIo();
    expect(await main(['status'], {}, bad.io)).toBe(2);
    expect(bad.err).toEqual(['error: status: --consumer is required', 'see: whalehunt-consumer status --help']);
    const help = captureIo();
    expect(await main(['resolve-gap', '--help'], {}, help.io)).toBe(0);
    expect(help.out.join('\n')).toContain(
      'usage: whalehunt-consumer resolve-gap --consumer ID --decision from_floor|live_cut|abandon',
    );
  });

  it('exits 2 on invalid configuration before connecting anywhere', async () => {
    const { io, err } = captureIo();
    expect(await main(['status', '--consumer', 'c'], { DATABASE_URL: 'not a url' }, io)).toBe(2);
    expect(err).toEqual(['error (config_invalid): invalid configuration: DATABASE_URL: must be a postgres:// URL']);
  });
});

describe('worker test crash points', () => {
  it('parses <point>:<position> and rejects anything else naming the variable', () => {
    expect(parseCrashAt(undefined)).toBeNull();
    expect(parseCrashAt('afterCommit:20')).toEqual({ point: 'afterCommit', position: 20 });
    for (const bad of ['afterCommit', 'beforeCommit:3', 'afterAck:0', 'afterAck:x']) {
      expect(() => parseCrashAt(bad)).toThrow(ConfigError);
    }
    expect(() => parseCrashAt('nope')).toThrow(
      'WHALEHUNT_TEST_CRASH_AT: must be <afterStage|afterCommit|afterAck>:<position>',
    );
  });
});

describe('worker process configuration', () => {
  it('exits 2 naming every bad variable, and never prints the API key or the signing secret', async () => {
    const apiKey = 'wh-secret-never-printed-1234';
    const shortSecret = 'whsec_c2hvcnQtc2VjcmV0';
    const result = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolveRun) => {
      execFile(
        process.execPath,
        ['--import', 'tsx', join(repoRoot, 'worker/main.ts')],
        {
          cwd: repoRoot,
          // A clean environment: only what the worker would read, with two problems in it.
          env: {
            PATH: process.env.PATH,
            WHALEHUNT_API_KEY: apiKey,
            WHALEHUNT_URL: 'http://not-a-websocket',
            LEASE_MS: '-5',
            WHALE_ALERT_WEBHOOK_URL: 'https://hooks.example/alerts',
            WHALE_ALERT_SIGNING_SECRET: shortSecret,
            WHALE_ALERT_MAX_AGE: '-1m',
            WHALE_ALERT_CONCURRENCY: '0',
          },
          timeout: 30_000,
        },
        (error, stdout, stderr) =>
          resolveRun({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, stdout, stderr }),
      );
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('whalehunt worker: invalid configuration');
    expect(result.stderr).toContain('DATABASE_URL: is required');
    expect(result.stderr).toContain('WHALEHUNT_URL: must be a ws:// or wss:// URL');
    expect(result.stderr).toContain('LEASE_MS: must be a positive integer');
    expect(result.stderr).toContain('WHALE_ALERT_SIGNING_SECRET: must be whsec_ followed by the base64 of 24 to 64');
    expect(result.stderr).toContain('WHALE_ALERT_MAX_AGE: must be a duration');
    expect(result.stderr).toContain('WHALE_ALERT_CONCURRENCY: must be a positive integer');
    expect(result.stdout + result.stderr).not.toContain(apiKey);
    expect(result.stdout + result.stderr).not.toContain('c2hvcnQtc2VjcmV0');
  });
});
