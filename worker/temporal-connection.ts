// The Temporal connection, configured the way the `temporal` CLI is: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
// TEMPORAL_API_KEY, TEMPORAL_TLS and its *_PATH/*_DATA/SERVER_NAME companions, TEMPORAL_PROFILE and the profile
// file (TEMPORAL_CONFIG_FILE, else the CLI's default temporal.toml), all read by @temporalio/envconfig once at
// start-up. The worker, the operator CLI and the main job connect through here, so one profile serves them and
// the `temporal` CLI alike. What this module adds: every problem names the setting that causes it, and the API
// key stays inside the connection options (never in a description, a log line or an error).
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { isIP } from 'node:net';
import { checkServerIdentity, connect as tlsConnect, type PeerCertificate } from 'node:tls';
import { Connection, type ConnectionOptions } from '@temporalio/client';
import {
  loadClientConfig,
  loadClientConfigProfile,
  toClientOptions,
  type ClientConfigProfile,
  type ClientConnectConfig,
  type ConfigDataSource,
} from '@temporalio/envconfig';
import type { NativeConnection, NativeConnectionOptions } from '@temporalio/worker';

export const DEFAULT_TEMPORAL_ADDRESS = '127.0.0.1:7233';
export const DEFAULT_TEMPORAL_NAMESPACE = 'default';

type TlsFile = 'clientCert' | 'clientKey' | 'serverCACert';

/** Where each TLS setting can be made: the variables (path or inline data) and the profile file's field. */
const TLS_SETTINGS: Record<TlsFile | 'serverName', { env: [string, ...string[]]; profileField: string }> = {
  clientCert: {
    env: ['TEMPORAL_TLS_CLIENT_CERT_PATH', 'TEMPORAL_TLS_CLIENT_CERT_DATA'],
    profileField: 'tls.client_cert_path',
  },
  clientKey: {
    env: ['TEMPORAL_TLS_CLIENT_KEY_PATH', 'TEMPORAL_TLS_CLIENT_KEY_DATA'],
    profileField: 'tls.client_key_path',
  },
  serverCACert: {
    env: ['TEMPORAL_TLS_SERVER_CA_CERT_PATH', 'TEMPORAL_TLS_SERVER_CA_CERT_DATA'],
    profileField: 'tls.server_ca_cert_path',
  },
  serverName: { env: ['TEMPORAL_TLS_SERVER_NAME'], profileField: 'tls.server_name' },
};

/** What may be logged or shown about the connection: where it goes and which settings shaped it, never the key. */
export interface TemporalConnectionSummary {
  address: string;
  namespace: string;
  /** The profile read from the profile file, or null when none was found (environment and defaults only). */
  profile: string | null;
  tls: 'off' | 'server-verified' | 'mutual';
  apiKeySet: boolean;
  /** The settings that supplied the TLS files and server name, e.g. `TEMPORAL_TLS_SERVER_CA_CERT_PATH`. */
  tlsSettings: Partial<Record<TlsFile | 'serverName', string>>;
}

export interface TemporalSettings {
  address: string;
  namespace: string;
  /** True when the environment or a profile names a server; the main job starts a dev server otherwise. */
  addressConfigured: boolean;
  summary: TemporalConnectionSummary;
  /** For NativeConnection.connect (the worker). A function, so the key never lands in a logged object. */
  nativeConnectionOptions(): NativeConnectionOptions;
  /** For Connection.connect (the operator CLI, the main job's client). */
  connectionOptions(): ConnectionOptions;
  /** Values a logger must redact (the API key, when set). */
  secrets(): string[];
}

/** A setting that cannot be used, by name (a variable or a profile field), never by value. */
export class TemporalSettingsError extends Error {
  readonly code = 'config_invalid';
  override readonly name = 'TemporalSettingsError';
  constructor(
    readonly problems: { variable: string; problem: string }[],
    options?: { cause?: unknown },
  ) {
    super(`invalid Temporal settings: ${problems.map((p) => `${p.variable}: ${p.problem}`).join('; ')}`, options);
  }
}

/** Connecting failed; the message names the address, the TLS settings in use and the likely culprit. */
export class TemporalConnectError extends Error {
  readonly code = 'temporal_unavailable';
  override readonly name = 'TemporalConnectError';
}

/**
 * Reads the connection settings once, as the `temporal` CLI would (environment over profile over defaults).
 * The TLS files are read and parsed here, so a missing or malformed file fails at start naming its setting.
 */
export function loadTemporalSettings(env: NodeJS.ProcessEnv = process.env): TemporalSettings {
  const environment = definedValues(env);
  const profileName = environment.TEMPORAL_PROFILE ?? 'default';
  let profile: ClientConfigProfile;
  let fileProfile: ClientConfigProfile | undefined;
  try {
    fileProfile = loadClientConfig({ overrideEnvVars: environment }).profiles[profileName];
    profile = loadClientConfigProfile({ overrideEnvVars: environment });
  } catch (error) {
    throw profileError(error, environment);
  }
  /** The variable that set it, else the profile field that did, else the variable to set. */
  const settingOf = (what: TlsFile | 'serverName'): string => {
    const { env: variables, profileField } = TLS_SETTINGS[what];
    const inFile = what === 'serverName' ? fileProfile?.tls?.serverName : fileProfile?.tls?.[what];
    return (
      variables.find((variable) => environment[variable] !== undefined) ??
      (inFile !== undefined ? profileSetting(profileName, profileField, environment) : variables[0])
    );
  };

  const tls = profile.tls?.disabled === true ? undefined : profile.tls;
  if (tls && (tls.clientCert === undefined) !== (tls.clientKey === undefined)) {
    const [present, absent]: [TlsFile, TlsFile] = tls.clientCert
      ? ['clientCert', 'clientKey']
      : ['clientKey', 'clientCert'];
    throw new TemporalSettingsError([
      {
        variable: settingOf(absent),
        problem: `is required with ${settingOf(present)} (a client certificate needs its private key)`,
      },
    ]);
  }

  let connect: ClientConnectConfig;
  try {
    connect = toClientOptions(profile);
  } catch (error) {
    // The library reads the files named by the *_PATH settings; say which setting named the unreadable one.
    const path = (error as NodeJS.ErrnoException).path;
    const file = (['clientCert', 'clientKey', 'serverCACert'] as const).find((f) => sourcePath(tls?.[f]) === path);
    throw new TemporalSettingsError(
      [{ variable: file ? settingOf(file) : 'TEMPORAL_TLS_*', problem: `cannot read ${path ?? 'the file'}` }],
      { cause: error },
    );
  }
  const tlsConfig = typeof connect.connectionOptions.tls === 'object' ? connect.connectionOptions.tls : null;
  if (tlsConfig) checkTlsMaterial(tlsConfig, settingOf);

  const address = connect.connectionOptions.address ?? DEFAULT_TEMPORAL_ADDRESS;
  const namespace = connect.namespace ?? DEFAULT_TEMPORAL_NAMESPACE;
  const tlsOn = connect.connectionOptions.tls !== undefined && connect.connectionOptions.tls !== false;
  const summary: TemporalConnectionSummary = {
    address,
    namespace,
    profile: fileProfile ? profileName : null,
    tls: !tlsOn ? 'off' : tlsConfig?.clientCertPair ? 'mutual' : 'server-verified',
    apiKeySet: connect.connectionOptions.apiKey !== undefined,
    tlsSettings: Object.fromEntries(
      (['serverCACert', 'clientCert', 'clientKey', 'serverName'] as const)
        .filter((what) => (what === 'serverName' ? tls?.serverName : tls?.[what]) !== undefined)
        .map((what) => [what, settingOf(what)]),
    ),
  };
  const nativeOptions: NativeConnectionOptions = { ...connect.connectionOptions, address };
  return {
    address,
    namespace,
    addressConfigured: connect.connectionOptions.address !== undefined,
    summary,
    nativeConnectionOptions: () => nativeOptions,
    connectionOptions: () => ({ ...nativeOptions, metadata: { ...nativeOptions.metadata } }),
    secrets: () => (nativeOptions.apiKey !== undefined ? [nativeOptions.apiKey] : []),
  };
}

/** The worker's connection; a failure becomes TemporalConnectError naming the settings. */
export async function connectNative(settings: TemporalSettings): Promise<NativeConnection> {
  // Loaded here, not with this module: the CLI reads the settings too, and the worker SDK (webpack, the native
  // runtime) is most of a CLI call's start-up.
  const { NativeConnection } = await import('@temporalio/worker');
  try {
    return await NativeConnection.connect(settings.nativeConnectionOptions());
  } catch (error) {
    throw connectError(settings, error, await tlsHandshakeProblem(settings, PROBE_TIMEOUT_MS));
  }
}

/**
 * A client connection (operator CLI, main job), bounded by `connectTimeoutMs`. The gRPC client reports a TLS
 * failure only as a missed deadline, so with TLS on a plain handshake runs alongside: its error ends the wait
 * at once and says what was refused.
 */
export async function connectClient(settings: TemporalSettings, connectTimeoutMs = 10_000): Promise<Connection> {
  if (tlsTarget(settings)?.ipServerName) dropIpServerNameWarning();
  const connecting = Connection.connect({ ...settings.connectionOptions(), connectTimeout: connectTimeoutMs });
  connecting.catch(() => undefined);
  const problem = await tlsHandshakeProblem(settings, connectTimeoutMs);
  if (problem) {
    void connecting.then((connection) => connection.close()).catch(() => undefined);
    throw connectError(settings, new Error(problem), problem);
  }
  try {
    return await connecting;
  } catch (error) {
    throw connectError(settings, error, null);
  }
}

const PROBE_TIMEOUT_MS = 5_000;
/** The HTTP/2 connection preface and an empty SETTINGS frame: a gRPC server answers with its own SETTINGS. */
const HTTP2_PREFACE = Buffer.concat([
  Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'),
  Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]),
]);

/**
 * A TLS handshake with the connection's own settings, then the HTTP/2 preface; resolves to why the server
 * or this client refused, or null when it answered (or TLS is off, or it took too long to tell).
 */
async function tlsHandshakeProblem(settings: TemporalSettings, timeoutMs: number): Promise<string | null> {
  const target = tlsTarget(settings);
  if (target === null) return null;
  const { material, host, port, serverName } = target;
  return new Promise((resolveProbe) => {
    const socket = tlsConnect({
      host,
      port,
      ALPNProtocols: ['h2'],
      // An IP address is no server name (RFC 6066): sent as none, and the certificate checked against it.
      ...(target.ipServerName
        ? { checkServerIdentity: (_host: string, cert: PeerCertificate) => checkServerIdentity(serverName, cert) }
        : { servername: serverName }),
      ...(material.serverRootCACertificate ? { ca: Buffer.from(material.serverRootCACertificate) } : {}),
      ...(material.clientCertPair
        ? { cert: Buffer.from(material.clientCertPair.crt), key: Buffer.from(material.clientCertPair.key) }
        : {}),
    });
    const settle = (problem: string | null): void => {
      clearTimeout(timer);
      socket.destroy();
      resolveProbe(problem);
    };
    const timer = setTimeout(() => settle(null), timeoutMs);
    socket.once('secureConnect', () => socket.write(HTTP2_PREFACE));
    socket.once('data', () => settle(null));
    socket.once('error', (error: Error) => settle(`TLS: ${opensslReason(error.message)}`));
    socket.once('close', () => settle('TLS: the server closed the connection after the handshake'));
  });
}

type TlsMaterial = Exclude<NativeConnectionOptions['tls'], undefined | null | boolean>;

/** Where a TLS connection goes and the server name it checks, or null with TLS off. */
function tlsTarget(
  settings: TemporalSettings,
): { material: TlsMaterial; host: string; port: number; serverName: string; ipServerName: boolean } | null {
  const { tls } = settings.nativeConnectionOptions();
  if (tls === undefined || tls === null || tls === false) return null;
  const material = tls === true ? {} : tls;
  const at = settings.address.lastIndexOf(':');
  const host = settings.address.slice(0, at).replace(/^\[(.*)\]$/, '$1');
  const serverName = material.serverNameOverride ?? host;
  return {
    material,
    host,
    port: Number(settings.address.slice(at + 1)),
    serverName,
    ipServerName: isIP(serverName) !== 0,
  };
}

/**
 * grpc-js (under @temporalio/client's Connection) always sends the server name as TLS SNI, and for an IP address
 * Node warns (DEP0123: RFC 6066 allows host names only) on the process's first handshake, i.e. on every CLI call.
 * Nothing is wrong and nothing is to be done about it: the server ignores such a name and the certificate is still
 * verified against the address. So that one warning is dropped, only in processes that connect to an IP address.
 */
function dropIpServerNameWarning(): void {
  if (ipServerNameWarningDropped) return;
  ipServerNameWarningDropped = true;
  const emitWarning = process.emitWarning.bind(process) as (...args: unknown[]) => void;
  const dropping = (...args: unknown[]): void => {
    // emitWarning(warning, type, code) or emitWarning(warning, { type, code })
    const [, typeOrOptions, code] = args;
    const options =
      typeof typeOrOptions === 'object' && typeOrOptions !== null ? (typeOrOptions as { code?: unknown }) : null;
    if ((options ? options.code : code) !== 'DEP0123') emitWarning(...args);
  };
  process.emitWarning = dropping;
}
let ipServerNameWarningDropped = false;

/** OpenSSL's "…:SSL routines:function:reason:file:line…" shortened to the reason. */
function opensslReason(message: string): string {
  return /SSL routines:[^:]*:([^:]+):/.exec(message)?.[1] ?? message.trim();
}

/** One line for errors and progress output: address, namespace, profile and TLS, never the key. */
export function describeTemporalConnection(summary: TemporalConnectionSummary): string {
  const tlsFiles = Object.values(summary.tlsSettings);
  return [
    `namespace ${summary.namespace}`,
    ...(summary.profile ? [`profile ${summary.profile}`] : []),
    summary.tls === 'off' ? 'TLS off' : `TLS ${summary.tls}${tlsFiles.length ? ` from ${tlsFiles.join(', ')}` : ''}`,
    ...(summary.apiKeySet ? ['API key from TEMPORAL_API_KEY or the profile'] : []),
  ].join('; ');
}

function connectError(settings: TemporalSettings, error: unknown, tlsProblem: string | null): TemporalConnectError {
  const reason = tlsProblem ?? (error instanceof Error ? error.message : String(error));
  const hint = likelyCulprit(settings.summary, reason);
  return new TemporalConnectError(
    `cannot reach Temporal at ${settings.address} (${describeTemporalConnection(settings.summary)}): ${reason}` +
      (hint ? `\n  ${hint}` : ''),
    { cause: error },
  );
}

/** Points at the setting a TLS or authentication failure most likely comes from. */
function likelyCulprit(summary: TemporalConnectionSummary, reason: string): string | null {
  const { tlsSettings } = summary;
  if (
    /unknown ?issuer|certificate verify failed|unable to (get|verify)|self[- ]signed|invalid peer cert/i.test(reason)
  ) {
    return tlsSettings.serverCACert
      ? `the server's certificate is not signed by the CA in ${tlsSettings.serverCACert}`
      : `the server's certificate is not signed by a system-trusted CA: set TEMPORAL_TLS_SERVER_CA_CERT_PATH`;
  }
  if (/not ?valid ?for ?name|hostname|subject ?alt|altnames/i.test(reason)) {
    return `the server's certificate does not name this host: check ${tlsSettings.serverName ?? 'TEMPORAL_TLS_SERVER_NAME'}`;
  }
  if (/certificate ?required|bad ?certificate|handshake|unknown ?ca|alert|peer closed|connection reset/i.test(reason)) {
    return summary.tls === 'mutual'
      ? `the server refused the client certificate in ${tlsSettings.clientCert} (signed by a CA it trusts?)`
      : 'the server may require a client certificate: set TEMPORAL_TLS_CLIENT_CERT_PATH and TEMPORAL_TLS_CLIENT_KEY_PATH';
  }
  if (/unauthenticated|permission ?denied|unauthorized/i.test(reason)) {
    return summary.apiKeySet
      ? 'the server refused the credentials: check TEMPORAL_API_KEY (or the profile api_key) and TEMPORAL_NAMESPACE'
      : 'the server wants credentials: set TEMPORAL_API_KEY or a client certificate';
  }
  if (summary.tls === 'off' && /protocol|http2|frame|GOAWAY|not.*tls/i.test(reason)) {
    return 'the server may expect TLS: set TEMPORAL_TLS=true';
  }
  return null;
}

/** Parses the certificates and key, so a wrong file fails now naming its setting, not later inside gRPC. */
function checkTlsMaterial(
  tls: NonNullable<Exclude<NativeConnectionOptions['tls'], boolean | null>>,
  settingOf: (file: TlsFile) => string,
): void {
  const problems: { variable: string; problem: string }[] = [];
  const attempt = (file: TlsFile, what: string, parse: () => void): void => {
    try {
      parse();
    } catch {
      problems.push({ variable: settingOf(file), problem: `is not a PEM ${what}` });
    }
  };
  if (tls.serverRootCACertificate) {
    attempt('serverCACert', 'certificate', () => new X509Certificate(tls.serverRootCACertificate!));
  }
  if (tls.clientCertPair) {
    const crt = Buffer.from(tls.clientCertPair.crt);
    const key = Buffer.from(tls.clientCertPair.key);
    attempt('clientCert', 'certificate', () => new X509Certificate(crt));
    attempt('clientKey', 'private key', () => createPrivateKey(key));
    if (problems.length === 0 && !new X509Certificate(crt).checkPrivateKey(createPrivateKey(key))) {
      problems.push({
        variable: settingOf('clientKey'),
        problem: `is not the private key of the certificate in ${settingOf('clientCert')}`,
      });
    }
  }
  if (problems.length) throw new TemporalSettingsError(problems);
}

function profileError(error: unknown, environment: Record<string, string>): TemporalSettingsError {
  const message = error instanceof Error ? error.message : String(error);
  const variable = /^Profile '/.test(message)
    ? 'TEMPORAL_PROFILE'
    : environment.TEMPORAL_CONFIG_FILE !== undefined
      ? 'TEMPORAL_CONFIG_FILE'
      : 'the profile file (temporal.toml)';
  return new TemporalSettingsError([{ variable, problem: message }], { cause: error });
}

function profileSetting(profile: string, field: string, environment: Record<string, string>): string {
  const file = environment.TEMPORAL_CONFIG_FILE ? ` (TEMPORAL_CONFIG_FILE)` : ' (temporal.toml)';
  return `profile.${profile}.${field}${file}`;
}

function sourcePath(source: ConfigDataSource | undefined): string | undefined {
  return source && 'path' in source ? source.path : undefined;
}

/**
 * The library takes the environment as strings only. An empty variable counts as unset, except the gRPC
 * metadata ones, where empty removes a header the profile sets.
 */
function definedValues(env: NodeJS.ProcessEnv): Record<string, string> {
  return Object.fromEntries(
    Object.entries(env).filter(
      (entry): entry is [string, string] =>
        entry[1] !== undefined && (entry[1] !== '' || entry[0].startsWith('TEMPORAL_GRPC_META_')),
    ),
  );
}
