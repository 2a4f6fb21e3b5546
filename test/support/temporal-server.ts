// The Temporal server of docker-compose.yml without Docker: the temporalio/server 1.31.2 binary built from source by
// scripts/ensure-temporal-server.sh, configured as the image configures it (its built-in config template, rendered
// from the environment: deploy/temporal/server.env plus what a host decides), its databases on a Postgres the test
// names, its frontend on mutual TLS. Started and stopped as operators do (SIGTERM), its JSON log lines kept.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Connection } from '@temporalio/client';
import { stopChildProcess } from './leaks.js';

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const SERVER_ENV_FILE = join(repoRoot, 'deploy/temporal/server.env');
const DYNAMIC_CONFIG_FILE = join(repoRoot, 'deploy/temporal/dynamicconfig.yaml');

/**
 * The settings docker-compose.yml's temporal service adds to deploy/temporal/server.env, each decided by where the
 * server runs; the suite sets every one of them too (test/unit/compose.test.ts holds the three lists equal).
 */
export const HOST_SETTINGS = [
  'BIND_ON_IP',
  'DB_PORT',
  'DYNAMIC_CONFIG_FILE_PATH',
  'POSTGRES_PWD',
  'POSTGRES_SEEDS',
  'POSTGRES_USER',
] as const;

export interface TemporalServerBuild {
  server: string;
  sqlTool: string;
  /** schema/postgresql/v12 of the release: temporal/versioned and visibility/versioned. */
  schemaDir: string;
}

/** The cached build (scripts/ensure-temporal-server.sh; a first run builds it, which takes minutes). */
export function ensureTemporalServer(): TemporalServerBuild {
  const output = execFileSync('bash', [join(repoRoot, 'scripts/ensure-temporal-server.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const found = readAssignments(output);
  return { server: found.TEMPORAL_SERVER!, sqlTool: found.TEMPORAL_SQL_TOOL!, schemaDir: found.TEMPORAL_SCHEMA_DIR! };
}

/** `NAME=value` lines (an env file, the ensure script's output); comments and blank lines skipped. */
export function readAssignments(text: string): Record<string, string> {
  return Object.fromEntries(
    text
      .split('\n')
      .map((line) => line.trim())
      .filter((line) => line !== '' && !line.startsWith('#'))
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
  );
}

export interface ServerTls {
  caCert: string;
  /** Presented by the frontend to clients. */
  frontendCert: string;
  frontendKey: string;
  /** Presented between the server's own services, and by its system worker to the frontend (mutual TLS). */
  internodeCert: string;
  internodeKey: string;
  /**
   * The names the server's own clients (its frontend calling itself, the system worker, the services between
   * them) expect in the frontend's and the internode certificate: Go's TLS wants one when the address is an IP.
   */
  frontendServerName: string;
  internodeServerName: string;
}

export interface ServerSettings {
  postgres: { host: string; port: number; user: string; password: string };
  databases: { temporal: string; visibility: string };
  ports: ServerPorts;
  tls: ServerTls;
}

export type ServerPorts = Record<(typeof PORT_SETTINGS)[number], number>;

/** Every port the server's four services listen on, so it shares the machine with anything. */
export const PORT_SETTINGS = [
  'FRONTEND_GRPC_PORT',
  'FRONTEND_HTTP_PORT',
  'FRONTEND_MEMBERSHIP_PORT',
  'HISTORY_GRPC_PORT',
  'HISTORY_MEMBERSHIP_PORT',
  'MATCHING_GRPC_PORT',
  'MATCHING_MEMBERSHIP_PORT',
  'WORKER_GRPC_PORT',
  'WORKER_MEMBERSHIP_PORT',
] as const;

/**
 * Ports free on 127.0.0.1 below 32768: the server records its services' ports in Postgres as smallint
 * (cluster_membership.rpc_port), and the OS hands out ephemeral ports above that range.
 */
export async function freeServerPorts(): Promise<ServerPorts> {
  const ports: Partial<ServerPorts> = {};
  const taken = new Set<number>();
  for (const name of PORT_SETTINGS) {
    for (;;) {
      const port = 10_000 + Math.floor(Math.random() * 22_000);
      if (!taken.has(port) && (await canListen(port))) {
        taken.add(port);
        ports[name] = port;
        break;
      }
    }
  }
  return ports as ServerPorts;
}

function canListen(port: number): Promise<boolean> {
  const server = createServer();
  return new Promise((resolveListen) => {
    server.once('error', () => resolveListen(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolveListen(true)));
  });
}

/** The server's environment: server.env, then this host's settings (HOST_SETTINGS), ports, and mutual TLS. */
export function serverEnvironment(settings: ServerSettings): Record<string, string> {
  const { postgres, databases, ports, tls } = settings;
  const host: Record<(typeof HOST_SETTINGS)[number], string> = {
    BIND_ON_IP: '127.0.0.1',
    DB_PORT: String(postgres.port),
    DYNAMIC_CONFIG_FILE_PATH: DYNAMIC_CONFIG_FILE,
    POSTGRES_PWD: postgres.password,
    POSTGRES_SEEDS: postgres.host,
    POSTGRES_USER: postgres.user,
  };
  return {
    ...readAssignments(readFileSync(SERVER_ENV_FILE, 'utf8')),
    ...host,
    DBNAME: databases.temporal,
    VISIBILITY_DBNAME: databases.visibility,
    TEMPORAL_BROADCAST_ADDRESS: '127.0.0.1',
    ...Object.fromEntries(Object.entries(ports).map(([name, port]) => [name, String(port)])),
    TEMPORAL_TLS_REQUIRE_CLIENT_AUTH: 'true',
    TEMPORAL_TLS_SERVER_CA_CERT: tls.caCert,
    TEMPORAL_TLS_SERVER_CERT: tls.internodeCert,
    TEMPORAL_TLS_SERVER_KEY: tls.internodeKey,
    TEMPORAL_TLS_FRONTEND_CERT: tls.frontendCert,
    TEMPORAL_TLS_FRONTEND_KEY: tls.frontendKey,
    // The template lists two client CAs (for a rotation); both are this one.
    TEMPORAL_TLS_CLIENT1_CA_CERT: tls.caCert,
    TEMPORAL_TLS_CLIENT2_CA_CERT: tls.caCert,
    TEMPORAL_TLS_FRONTEND_SERVER_NAME: tls.frontendServerName,
    TEMPORAL_TLS_INTERNODE_SERVER_NAME: tls.internodeServerName,
  };
}

export interface RunningServer {
  child: ChildProcess;
  /** stdout and stderr lines (the server logs JSON to stdout). */
  lines: string[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGTERM (a graceful shutdown), SIGKILL if it has not exited after `graceMs`. */
  stop(graceMs?: number): Promise<void>;
}

/** `temporal-server start` as the image's entrypoint runs it; nothing of this process's environment but PATH. */
export function startServer(binary: string, env: Record<string, string>): RunningServer {
  const child = spawn(binary, ['start'], {
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  for (const stream of [child.stdout, child.stderr])
    createInterface({ input: stream }).on('line', (l) => lines.push(l));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolveExit) =>
    child.once('exit', (code, signal) => resolveExit({ code, signal })),
  );
  return {
    child,
    lines,
    exited,
    stop: (graceMs = 30_000) => stopChildProcess(child, graceMs),
  };
}

export interface ClientTls {
  caCert: string;
  clientCert: string;
  clientKey: string;
  /** The name to expect in the server's certificate when not the address's host. */
  serverName?: string;
}

/** What the server's frontend answers about itself over mutual TLS (GetSystemInfo). */
export async function systemInfo(address: string, tls: ClientTls): Promise<{ serverVersion: string }> {
  const connection = await Connection.connect({
    address,
    connectTimeout: 5_000,
    tls: {
      serverRootCACertificate: readFileSync(tls.caCert),
      clientCertPair: { crt: readFileSync(tls.clientCert), key: readFileSync(tls.clientKey) },
      ...(tls.serverName ? { serverNameOverride: tls.serverName } : {}),
    },
  });
  try {
    const info = await connection.workflowService.getSystemInfo({});
    return { serverVersion: info.serverVersion ?? '' };
  } finally {
    await connection.close();
  }
}

export interface Handshake {
  protocol: string | null;
  cipher: string;
  alpn: string | false | null;
  serverSubject: string;
  serverIssuer: string;
  serverAltNames: string;
}

/** A TLS handshake with the frontend as a client with certificate: what it negotiated and who answered. */
export function tlsHandshake(address: string, tls: ClientTls): Promise<Handshake> {
  const at = address.lastIndexOf(':');
  return new Promise((resolveHandshake, reject) => {
    const socket = tlsConnect({
      host: address.slice(0, at),
      port: Number(address.slice(at + 1)),
      ca: readFileSync(tls.caCert),
      cert: readFileSync(tls.clientCert),
      key: readFileSync(tls.clientKey),
      ALPNProtocols: ['h2'],
      // No SNI for an IP address (RFC 6066); the certificate is still checked against it.
      servername: tls.serverName ?? '',
    });
    socket.once('error', reject);
    socket.once('secureConnect', () => {
      const peer = socket.getPeerCertificate();
      resolveHandshake({
        protocol: socket.getProtocol(),
        cipher: socket.getCipher().name,
        alpn: socket.alpnProtocol,
        serverSubject: String(peer.subject.CN ?? ''),
        serverIssuer: String(peer.issuer.CN ?? ''),
        serverAltNames: peer.subjectaltname ?? '',
      });
      socket.end();
    });
  });
}
