// The worker's configuration: parsed once from the environment, every invalid variable named in one error,
// and the API key never echoed (not in the error, not in the redacted form that is logged).
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, redact } from '../../worker/config.js';

const KEY = 'wh-live-8f3b2c1d9e';
const SECRET = `whsec_${Buffer.alloc(32, 0x5a).toString('base64')}`;
const HOOK = 'https://hooks.example/services/T0K3N?token=T0K3N';
const PREVIOUS_SECRET = `whsec_${Buffer.alloc(24, 0x33).toString('base64')}`;
const valid = {
  DATABASE_URL: 'postgres://app:s3cret@db:5432/whalehunt',
  WHALEHUNT_URL: 'wss://stream.example/v1/stream',
  WHALEHUNT_API_KEY: KEY,
};

describe('loadConfig', () => {
  it('applies defaults around the required variables', () => {
    const config = loadConfig(valid);
    expect(config).toMatchObject({
      databaseUrl: valid.DATABASE_URL,
      temporal: { address: '127.0.0.1:7233', namespace: 'default' },
      taskQueue: 'whalehunt-consumer',
      leaseMs: 300_000,
      logLevel: 'INFO',
      whaleAlert: { minNotional: null, webhookUrl: null },
    });
    expect(config.stream).toMatchObject({
      url: valid.WHALEHUNT_URL,
      apiKey: KEY,
      quarantinePolicy: { terminalReasons: [] },
      actions: { whaleAlertMinNotional: null },
    });
  });

  it('parses bounds, the terminal quarantine reasons and the whale alert', () => {
    const config = loadConfig({
      ...valid,
      STAGING_MAX_EVENTS: '500',
      LEASE_MS: '60000',
      QUARANTINE_TERMINAL_REASONS: 'unsupported_kind, unknown_correction_target',
      WHALE_ALERT_MIN_NOTIONAL: '50000',
      WHALE_ALERT_WEBHOOK_URL: 'https://hooks.example/whales',
      WHALE_ALERT_SIGNING_SECRET: SECRET,
      LOG_LEVEL: 'debug',
    });
    expect(config.stream.staging.maxEvents).toBe(500);
    expect(config.leaseMs).toBe(60_000);
    expect(config.stream.quarantinePolicy.terminalReasons).toEqual(['unsupported_kind', 'unknown_correction_target']);
    expect(config.stream.actions.whaleAlertMinNotional).toBe('50000');
    expect(config.whaleAlert.webhookUrl).toBe('https://hooks.example/whales');
    expect(config.logLevel).toBe('DEBUG');
  });

  it('names every invalid variable at once and never echoes a value', () => {
    let error: unknown;
    try {
      loadConfig({
        WHALEHUNT_URL: `http://x/?key=${KEY}`,
        LEASE_MS: '-5',
        QUARANTINE_TERMINAL_REASONS: 'mystery',
        WHALE_ALERT_MIN_NOTIONAL: '1e5',
      });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(ConfigError);
    const { problems, message, code } = error as ConfigError;
    expect(code).toBe('config_invalid');
    expect(problems.map((p) => p.variable).sort()).toEqual([
      'DATABASE_URL',
      'LEASE_MS',
      'QUARANTINE_TERMINAL_REASONS',
      'WHALEHUNT_API_KEY',
      'WHALEHUNT_URL',
      'WHALE_ALERT_MIN_NOTIONAL',
    ]);
    expect(message).not.toContain(KEY);
    expect(message).toContain('WHALEHUNT_API_KEY: is required (the stream API key)');
  });

  it('whale alerts: live only within 5 minutes by default; age, replay, concurrency and both secrets parsed', () => {
    expect(loadConfig(valid).whaleAlert).toEqual({
      minNotional: null,
      webhookUrl: null,
      maxAgeMs: 300_000,
      onReplay: false,
      concurrency: 8,
      timeoutMs: 10_000,
      signingSecrets: [],
    });
    const config = loadConfig({
      ...valid,
      WHALE_ALERT_MIN_NOTIONAL: '1000',
      WHALE_ALERT_WEBHOOK_URL: 'https://hooks.example/whales',
      WHALE_ALERT_MAX_AGE: '90s',
      WHALE_ALERT_ON_REPLAY: 'true',
      WHALE_ALERT_CONCURRENCY: '16',
      WHALE_ALERT_TIMEOUT: '2500ms',
      WHALE_ALERT_SIGNING_SECRET: SECRET,
      WHALE_ALERT_SIGNING_SECRET_PREVIOUS: PREVIOUS_SECRET,
    });
    expect(config.whaleAlert).toMatchObject({
      maxAgeMs: 90_000,
      onReplay: true,
      concurrency: 16,
      timeoutMs: 2_500,
      signingSecrets: [SECRET, PREVIOUS_SECRET],
    });
    expect(config.stream.actions).toEqual({
      whaleAlertMinNotional: '1000',
      whaleAlertMaxAgeMs: 90_000,
      whaleAlertOnReplay: true,
    });
    // 0: no age bound.
    expect(loadConfig({ ...valid, WHALE_ALERT_MAX_AGE: '0' }).stream.actions.whaleAlertMaxAgeMs).toBeNull();
    const shown = JSON.stringify(redact({ ...config, whaleAlert: { ...config.whaleAlert, webhookUrl: HOOK } }));
    expect(shown).toContain('"webhookUrl":"https://hooks.example/…"');
    expect(shown).not.toContain('T0K3N');
    expect(shown).not.toContain(SECRET.slice(6));
    expect(shown).not.toContain(PREVIOUS_SECRET.slice(6));
  });

  it('whale alerts: an empty or short secret, a missing one, a negative age and a concurrency of 0 are named, never echoed', () => {
    const shortSecret = `whsec_${Buffer.alloc(8, 1).toString('base64')}`;
    const problemsOf = (env: Record<string, string>) => {
      try {
        loadConfig({ ...valid, ...env });
      } catch (error) {
        expect(error).toBeInstanceOf(ConfigError);
        expect((error as ConfigError).message).not.toContain(shortSecret.slice(6));
        return (error as ConfigError).problems;
      }
      throw new Error('expected a ConfigError');
    };
    expect(
      problemsOf({
        WHALE_ALERT_SIGNING_SECRET: shortSecret,
        WHALE_ALERT_SIGNING_SECRET_PREVIOUS: '',
        WHALE_ALERT_MAX_AGE: '-5m',
        WHALE_ALERT_CONCURRENCY: '0',
        WHALE_ALERT_ON_REPLAY: 'yes',
      }).map((p) => p.variable),
    ).toEqual([
      'WHALE_ALERT_MAX_AGE',
      'WHALE_ALERT_ON_REPLAY',
      'WHALE_ALERT_CONCURRENCY',
      'WHALE_ALERT_SIGNING_SECRET',
      'WHALE_ALERT_SIGNING_SECRET_PREVIOUS',
    ]);
    expect(problemsOf({ WHALE_ALERT_MAX_AGE: '300' })).toEqual([
      { variable: 'WHALE_ALERT_MAX_AGE', problem: 'must be a duration such as 300s, 5m or 1h (0: no bound)' },
    ]);
    // A webhook is never sent unsigned.
    expect(problemsOf({ WHALE_ALERT_WEBHOOK_URL: 'https://hooks.example/whales' })).toEqual([
      {
        variable: 'WHALE_ALERT_SIGNING_SECRET',
        problem: expect.stringContaining('is required with WHALE_ALERT_WEBHOOK_URL') as unknown,
      },
    ]);
  });

  it('page settings: defaults, overrides, and a clear error for each bad value', () => {
    expect(loadConfig(valid).pages).toEqual({ stream: 'polymarket', limit: 500, chunkSize: 100 });
    expect(loadConfig({ ...valid, PAGE_STREAM: 'kalshi', PAGE_LIMIT: '50', PAGE_CHUNK_SIZE: '7' }).pages).toEqual({
      stream: 'kalshi',
      limit: 50,
      chunkSize: 7,
    });
    let error: unknown;
    try {
      loadConfig({ ...valid, PAGE_STREAM: ' ', PAGE_LIMIT: '0', PAGE_CHUNK_SIZE: '20000' });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).problems).toEqual([
      { variable: 'PAGE_STREAM', problem: 'must not be empty' },
      { variable: 'PAGE_LIMIT', problem: 'must be a positive integer' },
      { variable: 'PAGE_CHUNK_SIZE', problem: 'must be at most 10000 (events per transaction)' },
    ]);
  });

  it('sizing: the Postgres pool and the activity slots, defaults, overrides and each bad value named', () => {
    expect(loadConfig(valid)).toMatchObject({ databasePoolSize: 10, maxConcurrentActivities: 100 });
    expect(loadConfig({ ...valid, DATABASE_POOL_SIZE: '4', MAX_CONCURRENT_ACTIVITIES: '12' })).toMatchObject({
      databasePoolSize: 4,
      maxConcurrentActivities: 12,
    });
    let error: unknown;
    try {
      loadConfig({ ...valid, DATABASE_POOL_SIZE: '0', MAX_CONCURRENT_ACTIVITIES: 'many' });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect((error as ConfigError).problems).toEqual([
      { variable: 'DATABASE_POOL_SIZE', problem: 'must be a positive integer' },
      { variable: 'MAX_CONCURRENT_ACTIVITIES', problem: 'must be a positive integer' },
    ]);
  });

  it('heap growth: 75% by default, a percentage from 10 to 300, off for V8 own; anything else named', () => {
    expect(loadConfig(valid).heapGrowthPercent).toBe(75);
    expect(loadConfig({ ...valid, HEAP_GROWTH_PERCENT: '100' }).heapGrowthPercent).toBe(100);
    expect(loadConfig({ ...valid, HEAP_GROWTH_PERCENT: ' OFF ' }).heapGrowthPercent).toBeNull();
    for (const bad of ['5', '301', '-1', '30%', '']) {
      let error: unknown;
      try {
        loadConfig({ ...valid, HEAP_GROWTH_PERCENT: bad });
      } catch (caught) {
        error = caught;
      }
      expect(error, bad).toBeInstanceOf(ConfigError);
      expect((error as ConfigError).problems).toEqual([
        { variable: 'HEAP_GROWTH_PERCENT', problem: 'must be a percentage from 10 to 300, or off' },
      ]);
    }
  });

  it('redact() hides the API key and URL passwords', () => {
    const shown = JSON.stringify(redact(loadConfig(valid)));
    expect(shown).not.toContain(KEY);
    expect(shown).not.toContain('s3cret');
    expect(shown).toContain('postgres://app:[REDACTED]@db:5432/whalehunt');
  });
});
