// The Temporal connection settings as @temporalio/envconfig reads them (variables over the profile file),
// with every unusable setting named (variable or profile field) and the API key kept out of the summary.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  connectClient,
  loadTemporalSettings,
  TemporalConnectError,
  TemporalSettingsError,
} from '../../worker/temporal-connection.js';
import { generateTestPki, startTlsProxy } from '../support/tls-proxy.js';

const dir = mkdtempSync(join(tmpdir(), 'temporal-settings-'));
const pki = generateTestPki(dir);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function problemsOf(env: NodeJS.ProcessEnv): { variable: string; problem: string }[] {
  try {
    loadTemporalSettings(env);
  } catch (error) {
    if (error instanceof TemporalSettingsError) return error.problems;
    throw error;
  }
  throw new Error('expected TemporalSettingsError');
}

function profileFile(text: string): string {
  const path = join(dir, `profile-${Math.random().toString(36).slice(2)}.toml`);
  writeFileSync(path, text);
  return path;
}

describe('loadTemporalSettings', () => {
  it('an API key implies TLS; the key is in the options and the secrets, never in the summary', () => {
    const key = 'tmprl-unit-secret-key';
    const settings = loadTemporalSettings({
      TEMPORAL_ADDRESS: 'my-ns.a1b2c.tmprl.cloud:7233',
      TEMPORAL_NAMESPACE: 'my-ns.a1b2c',
      TEMPORAL_API_KEY: key,
    });
    expect(settings.nativeConnectionOptions()).toMatchObject({ address: 'my-ns.a1b2c.tmprl.cloud:7233', tls: true });
    expect(settings.connectionOptions().apiKey).toBe(key);
    expect(settings.secrets()).toEqual([key]);
    expect(settings.summary).toMatchObject({ namespace: 'my-ns.a1b2c', tls: 'server-verified', apiKeySet: true });
    expect(JSON.stringify(settings)).not.toContain(key);
  });

  it('reads the named profile, and the variables override it', () => {
    const configFile = profileFile(
      `[profile.prod]\naddress = "temporal.internal:7233"\nnamespace = "prod"\n[profile.prod.tls]\n` +
        `server_ca_cert_path = "${pki.caCert}"\nclient_cert_path = "${pki.clientCert}"\nclient_key_path = "${pki.clientKey}"\n`,
    );
    const settings = loadTemporalSettings({ TEMPORAL_CONFIG_FILE: configFile, TEMPORAL_PROFILE: 'prod' });
    expect(settings).toMatchObject({ address: 'temporal.internal:7233', namespace: 'prod', addressConfigured: true });
    expect(settings.summary).toMatchObject({
      profile: 'prod',
      tls: 'mutual',
      tlsSettings: { serverCACert: 'profile.prod.tls.server_ca_cert_path (TEMPORAL_CONFIG_FILE)' },
    });
    const overridden = loadTemporalSettings({
      TEMPORAL_CONFIG_FILE: configFile,
      TEMPORAL_PROFILE: 'prod',
      TEMPORAL_NAMESPACE: 'staging',
      TEMPORAL_TLS_SERVER_CA_CERT_PATH: pki.otherCaCert,
    });
    expect(overridden.namespace).toBe('staging');
    expect(overridden.summary.tlsSettings.serverCACert).toBe('TEMPORAL_TLS_SERVER_CA_CERT_PATH');
  });

  it('defaults to a local server without TLS when nothing is configured', () => {
    const settings = loadTemporalSettings({ TEMPORAL_ADDRESS: '', XDG_CONFIG_HOME: join(dir, 'none') });
    expect(settings).toMatchObject({ address: '127.0.0.1:7233', namespace: 'default', addressConfigured: false });
    expect(settings.nativeConnectionOptions().tls).toBeUndefined();
  });

  it('names the setting of an unknown profile, an unreadable file, a non-PEM file and a mismatched key', () => {
    const configFile = profileFile('[profile.default]\naddress = "x:7233"\n');
    expect(problemsOf({ TEMPORAL_CONFIG_FILE: configFile, TEMPORAL_PROFILE: 'nope' })).toEqual([
      { variable: 'TEMPORAL_PROFILE', problem: "Profile 'nope' not found in config data" },
    ]);
    expect(problemsOf({ TEMPORAL_TLS_SERVER_CA_CERT_PATH: join(dir, 'missing.pem') })).toEqual([
      { variable: 'TEMPORAL_TLS_SERVER_CA_CERT_PATH', problem: `cannot read ${join(dir, 'missing.pem')}` },
    ]);
    expect(problemsOf({ TEMPORAL_TLS_SERVER_CA_CERT_PATH: configFile })).toEqual([
      { variable: 'TEMPORAL_TLS_SERVER_CA_CERT_PATH', problem: 'is not a PEM certificate' },
    ]);
    expect(
      problemsOf({ TEMPORAL_TLS_CLIENT_CERT_PATH: pki.clientCert, TEMPORAL_TLS_CLIENT_KEY_PATH: pki.serverKey }),
    ).toEqual([
      {
        variable: 'TEMPORAL_TLS_CLIENT_KEY_PATH',
        problem: 'is not the private key of the certificate in TEMPORAL_TLS_CLIENT_CERT_PATH',
      },
    ]);
  });
});

describe('connectClient over TLS to an IP address', () => {
  it('verifies the certificate against the address and prints no DEP0123 (an IP address as TLS server name)', async () => {
    const warnings: (Error & { code?: string })[] = [];
    const onWarning = (warning: Error): void => void warnings.push(warning);
    process.on('warning', onWarning);
    // Nothing behind the proxy: the call fails after the handshake, which is where Node would warn.
    const proxy = await startTlsProxy(pki, '127.0.0.1:1');
    try {
      const settings = loadTemporalSettings({
        TEMPORAL_ADDRESS: proxy.address,
        TEMPORAL_TLS_SERVER_CA_CERT_PATH: pki.caCert,
        TEMPORAL_TLS_CLIENT_CERT_PATH: pki.clientCert,
        TEMPORAL_TLS_CLIENT_KEY_PATH: pki.clientKey,
        XDG_CONFIG_HOME: join(dir, 'none'),
      });
      await expect(connectClient(settings, 3_000)).rejects.toBeInstanceOf(TemporalConnectError);
      expect(proxy.refusedHandshakes).toEqual([]);
      expect(proxy.accepted()).toBeGreaterThan(0);
      // Other warnings still get through.
      process.emitWarning('still heard', { code: 'WHALEHUNT_TEST' });
      await new Promise((resolveTick) => setImmediate(resolveTick));
      expect(warnings.map((warning) => warning.code)).toEqual(['WHALEHUNT_TEST']);
    } finally {
      process.off('warning', onWarning);
      await proxy.close();
    }
  });
});
