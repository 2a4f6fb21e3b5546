// docker-compose.yml as Docker Compose reads it (rendered by the real `docker-compose config`; no daemon, no
// containers) and the scripts its one-shot services run, executed here against stub `temporal`/`node` commands.
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { WorkflowExecutionAlreadyStartedError } from '@temporalio/client';
import { afterAll, describe, expect, it, vi } from 'vitest';
import type * as Consumers from '../../cli/consumers.js';
import { main } from '../../cli/main.js';
import { SEARCH_ATTRIBUTES } from '../../workflows/definitions.js';
import {
  HOST_SETTINGS,
  PORT_SETTINGS,
  readAssignments,
  SERVER_ENV_FILE,
  serverEnvironment,
  type ServerPorts,
} from '../support/temporal-server.js';

// The CLI's `start` against a Temporal where the consumer already runs, without a server: the real command and
// error formatting, a client whose start fails the way the server's does.
vi.mock('../../cli/consumers.js', async (importOriginal) => ({
  ...(await importOriginal<typeof Consumers>()),
  connectTemporal: (config: unknown) =>
    Promise.resolve({
      config,
      client: {
        workflow: {
          start: (_type: string, options: { workflowId: string }) =>
            Promise.reject(
              new WorkflowExecutionAlreadyStartedError('already started', options.workflowId, 'consumerWorkflow'),
            ),
        },
      },
      close: () => Promise.resolve(),
    }),
}));

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const COMPOSE_FILE = join(repoRoot, 'docker-compose.yml');
const REQUIRED_ENV = { WHALEHUNT_URL: 'wss://stream.example/ws', WHALEHUNT_API_KEY: 'test-key' };

interface ComposeService {
  image?: string;
  build?: unknown;
  pull_policy?: string;
  entrypoint?: string[];
  command?: string[];
  environment?: Record<string, string | null>;
  ports?: (string | { host_ip?: string; published?: string | number; target: number })[];
  volumes?: (string | { type: string; source?: string; target: string; read_only?: boolean })[];
  depends_on?: Record<string, { condition: string }>;
  restart?: string;
}
interface ComposeConfig {
  services: Record<string, ComposeService>;
}

/** The environment with the variables the compose file reads removed, so its defaults render. */
function composeEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!/^(WHALEHUNT_|LOG_LEVEL$|COMPOSE_)/.test(key)) env[key] = value;
  }
  return { ...env, ...extra };
}

function dockerCompose(args: string[], env: NodeJS.ProcessEnv) {
  return spawnSync('docker-compose', ['-f', COMPOSE_FILE, ...args], { cwd: repoRoot, env, encoding: 'utf8' });
}

function composeVersion(): string {
  const result = spawnSync('docker-compose', ['version', '--short'], { encoding: 'utf8' });
  if (result.error || result.status !== 0) {
    throw new Error(
      'docker-compose is not installed: this test parses docker-compose.yml with it. .ci/run installs it ' +
        '(apt-get install docker-compose); locally: sudo apt-get install -y docker-compose',
    );
  }
  return result.stdout.trim();
}

/** `docker-compose config` as JSON: Compose v2 prints it; v1 prints YAML, read by the Python it runs on. */
function renderCompose(env: NodeJS.ProcessEnv): ComposeConfig {
  const v1 = composeVersion().startsWith('1.');
  const rendered = dockerCompose(v1 ? ['config'] : ['config', '--format', 'json'], env);
  if (rendered.status !== 0) throw new Error(`docker-compose config failed:\n${rendered.stderr}`);
  if (!v1) return JSON.parse(rendered.stdout) as ComposeConfig;
  const bin = execFileSync('sh', ['-c', 'command -v docker-compose'], { encoding: 'utf8' }).trim();
  const python = /^#!\s*(\S+)/.exec(readFileSync(realpathSync(bin), 'utf8'))?.[1] ?? 'python3';
  const json = execFileSync(python, ['-c', 'import json,sys,yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)'], {
    input: rendered.stdout,
    encoding: 'utf8',
  });
  return JSON.parse(json) as ComposeConfig;
}

function publishedPorts(service: ComposeService): { hostIp: string; published: number; target: number }[] {
  return (service.ports ?? []).map((port) => {
    if (typeof port !== 'string') {
      return { hostIp: port.host_ip ?? '', published: Number(port.published), target: port.target };
    }
    // v1 renders "[ip:]published:target[/protocol]".
    const parts = port.replace(/\/\w+$/, '').split(':');
    const target = Number(parts.pop());
    const published = Number(parts.pop());
    return { hostIp: parts.join(':'), published, target };
  });
}

function bindMounts(service: ComposeService): { source: string; target: string; readOnly: boolean }[] {
  return (service.volumes ?? []).flatMap((volume) => {
    if (typeof volume !== 'string') {
      return volume.type === 'bind' && volume.source
        ? [{ source: volume.source, target: volume.target, readOnly: volume.read_only === true }]
        : [];
    }
    const [source = '', target = '', mode = ''] = volume.split(':');
    return source.startsWith('/') ? [{ source, target, readOnly: mode.split(',').includes('ro') }] : [];
  });
}

/** The repository file a service's script path refers to, through its bind mounts (or the image's /app). */
function scriptOnHost(service: ComposeService, path: string): string {
  const mount = bindMounts(service).find((m) => path === m.target || path.startsWith(`${m.target}/`));
  if (mount) return join(mount.source, path.slice(mount.target.length));
  expect(service.build ?? service.pull_policy, `${path} is neither mounted nor in the worker image`).toBeDefined();
  return join(repoRoot, path);
}

/** A directory with executable stubs, put first on PATH; each records its arguments, one call per line. */
function stubCommands(stubs: Record<string, string>): { path: string; calls: (name: string) => string[][] } {
  const dir = mkdtempSync(join(tmpdir(), 'compose-stubs-'));
  for (const [name, body] of Object.entries(stubs)) {
    const file = join(dir, name);
    writeFileSync(file, `#!/bin/sh\necho "$*" >> "${dir}/${name}.calls"\n${body}\n`);
    chmodSync(file, 0o755);
  }
  return {
    path: dir,
    calls: (name) => {
      const log = join(dir, `${name}.calls`);
      if (!existsSync(log)) return [];
      return readFileSync(log, 'utf8')
        .trimEnd()
        .split('\n')
        .map((line) => line.split(' '));
    },
  };
}

function runScript(script: string, stubDir: string, env: Record<string, string>) {
  return spawnSync('sh', [script], {
    cwd: repoRoot,
    env: { PATH: `${stubDir}${delimiter}${process.env.PATH ?? ''}`, ...env },
    encoding: 'utf8',
  });
}

describe('docker-compose.yml', () => {
  // Rendered on first use, in a test: without docker-compose every test fails (none is reported as skipped).
  let rendered: ComposeConfig | undefined;
  const compose = (): ComposeConfig => (rendered ??= renderCompose(composeEnv(REQUIRED_ENV)));
  const stubDirs: string[] = [];
  afterAll(() => {
    for (const dir of stubDirs) rmSync(dir, { recursive: true, force: true });
  });
  const service = (name: string): ComposeService => {
    const found = compose().services[name];
    if (!found) throw new Error(`docker-compose.yml has no service ${name}`);
    return found;
  };

  it('runs the stack on current images, without the deprecated temporalio/auto-setup', () => {
    expect(Object.keys(compose().services).sort()).toEqual([
      'consumer-start',
      'postgres',
      'temporal',
      'temporal-namespace',
      'temporal-schema',
      'temporal-ui',
      'worker',
    ]);
    expect(service('temporal').image).toMatch(/^temporalio\/server:/);
    expect(service('temporal-schema').image).toMatch(/^temporalio\/admin-tools:/);
    expect(service('temporal-namespace').image).toBe(service('temporal-schema').image);
    expect(service('temporal-ui').image).toMatch(/^temporalio\/ui:/);
    expect(service('postgres').image).toMatch(/^postgres:/);
    expect(JSON.stringify(compose())).not.toContain('auto-setup');
  });

  it('pins every pulled image to a full version, and the worker image to a pinned Node', () => {
    for (const [name, svc] of Object.entries(compose().services)) {
      if (svc.build !== undefined || svc.pull_policy === 'never') continue;
      // Postgres versions are major.minor; Temporal's are major.minor.patch (major.minor tags move).
      const version = svc.image?.startsWith('postgres:') ? String.raw`\d+\.\d+` : String.raw`\d+\.\d+\.\d+`;
      expect(svc.image, name).toMatch(new RegExp(`^[\\w./-]+:${version}(-[\\w.]+)?$`));
      expect(svc.image, name).not.toMatch(/latest/);
    }
    // consumer-start runs the image the worker builds; it must never be looked up on a registry.
    expect(service('consumer-start').image).toBe(service('worker').image);
    expect(service('consumer-start').pull_policy).toBe('never');
    const from = /^FROM\s+(\S+)/m.exec(readFileSync(join(repoRoot, 'Dockerfile'), 'utf8'))?.[1];
    expect(from).toMatch(/^node:\d+\.\d+\.\d+-[\w.-]+$/);
  });

  it('publishes no host port 5432, and everything it publishes on loopback only', () => {
    const published = Object.entries(compose().services).flatMap(([name, svc]) =>
      publishedPorts(svc).map((p) => ({ name, ...p })),
    );
    expect(published.map((p) => p.published)).not.toContain(5432);
    expect(published.every((p) => p.hostIp === '127.0.0.1')).toBe(true);
    expect(published.map(({ name, published: port }) => `${name} ${port}`).sort()).toEqual([
      'postgres 55432',
      'temporal 7233',
      'temporal-ui 8080',
    ]);
  });

  it('orders the one-shot setup services by depends_on conditions', () => {
    const conditions = Object.fromEntries(
      Object.entries(compose().services).map(([name, svc]) => [
        name,
        Object.fromEntries(Object.entries(svc.depends_on ?? {}).map(([dep, d]) => [dep, d.condition])),
      ]),
    );
    expect(conditions).toEqual({
      postgres: {},
      'temporal-schema': { postgres: 'service_healthy' },
      temporal: { 'temporal-schema': 'service_completed_successfully' },
      'temporal-namespace': { temporal: 'service_healthy' },
      'temporal-ui': { temporal: 'service_healthy' },
      worker: { postgres: 'service_healthy', 'temporal-namespace': 'service_completed_successfully' },
      'consumer-start': { 'temporal-namespace': 'service_completed_successfully', worker: 'service_started' },
    });
    for (const oneShot of ['temporal-schema', 'temporal-namespace', 'consumer-start']) {
      expect(service(oneShot).restart, oneShot).toBe('no');
    }
    // Temporal and its two setup services use the stack's Postgres.
    expect(service('temporal').environment).toMatchObject({ DB: 'postgres12', POSTGRES_SEEDS: 'postgres' });
    expect(service('temporal-schema').environment).toMatchObject({ POSTGRES_SEEDS: 'postgres' });
    expect(service('worker').environment?.DATABASE_URL).toMatch(/@postgres:5432\//);
  });

  it('sets up both Temporal databases with temporal-sql-tool', () => {
    const svc = service('temporal-schema');
    const script = readFileSync(scriptOnHost(svc, svc.command?.at(-1) ?? ''), 'utf8');
    expect(script).toContain('sql_tool=${TEMPORAL_SQL_TOOL:-temporal-sql-tool}');
    expect(script).toContain('schema_root=${TEMPORAL_SCHEMA_DIR:-/etc/temporal/schema/postgresql/v12}');
    for (const step of ['create-database', 'setup-schema -v 0.0', 'update-schema -d']) {
      expect(script).toContain(`"$sql_tool" "$@" ${step}`);
    }
    // The databases the server is configured with, named in the same variables.
    expect(script).toContain('"${DBNAME:-temporal}:temporal" "${VISIBILITY_DBNAME:-temporal_visibility}:visibility"');
    expect(svc.environment).toMatchObject({
      DBNAME: service('temporal').environment?.DBNAME,
      VISIBILITY_DBNAME: service('temporal').environment?.VISIBILITY_DBNAME,
    });
    const dynamicConfig = bindMounts(service('temporal')).find(
      (m) => m.target === service('temporal').environment?.DYNAMIC_CONFIG_FILE_PATH,
    );
    expect(dynamicConfig && existsSync(dynamicConfig.source)).toBe(true);
  });

  it("runs the server with deploy/temporal/server.env and the host's settings, as the topology suite does", () => {
    const shared = readAssignments(readFileSync(SERVER_ENV_FILE, 'utf8'));
    const composed = service('temporal').environment ?? {};
    expect(Object.keys(composed).sort()).toEqual([...Object.keys(shared), ...HOST_SETTINGS].sort());
    expect(composed).toMatchObject(shared);
    // The suite's server: the same settings (its own database names, ports and mutual TLS on top).
    const topology = serverEnvironment({
      postgres: { host: '127.0.0.1', port: 5432, user: 'postgres', password: 'x' },
      databases: { temporal: 't', visibility: 'v' },
      ports: Object.fromEntries(PORT_SETTINGS.map((name) => [name, 1])) as ServerPorts,
      tls: {
        caCert: 'ca',
        frontendCert: 'f',
        frontendKey: 'fk',
        internodeCert: 'i',
        internodeKey: 'ik',
        frontendServerName: 'localhost',
        internodeServerName: 'localhost',
      },
    });
    expect(Object.keys(topology)).toEqual(expect.arrayContaining(Object.keys(composed)));
    expect(topology).toMatchObject({ ...shared, DBNAME: 't', VISIBILITY_DBNAME: 'v' });
    expect(existsSync(topology.DYNAMIC_CONFIG_FILE_PATH!)).toBe(true);
    const mounted = bindMounts(service('temporal')).find((m) => m.target === composed.DYNAMIC_CONFIG_FILE_PATH);
    expect(mounted?.source).toBe(topology.DYNAMIC_CONFIG_FILE_PATH);
  });

  it('registers exactly the search attributes of workflows/definitions.ts, idempotently', () => {
    const svc = service('temporal-namespace');
    const attributes = svc.environment?.WHALEHUNT_SEARCH_ATTRIBUTES ?? '';
    expect(Object.fromEntries(attributes.split(/\s+/).map((spec) => spec.split('=')))).toEqual(SEARCH_ATTRIBUTES);

    // A server where the namespace is missing and one attribute already exists.
    const [firstName] = Object.keys(SEARCH_ATTRIBUTES);
    const stubs = stubCommands({
      temporal: [
        'case "$1 $2 $3" in',
        '  "operator namespace describe") exit 1 ;;',
        `  "operator search-attribute list") echo "  ${firstName}   Keyword" ;;`,
        'esac',
      ].join('\n'),
    });
    stubDirs.push(stubs.path);
    const result = runScript(scriptOnHost(svc, svc.command?.at(-1) ?? ''), stubs.path, {
      TEMPORAL_ADDRESS: svc.environment?.TEMPORAL_ADDRESS ?? '',
      TEMPORAL_NAMESPACE: svc.environment?.TEMPORAL_NAMESPACE ?? '',
      WHALEHUNT_SEARCH_ATTRIBUTES: attributes,
    });
    expect(result.status, result.stderr).toBe(0);
    const calls = stubs.calls('temporal');
    const creates = calls.filter((c) => c[1] === 'search-attribute' && c[2] === 'create');
    const missing = Object.entries(SEARCH_ATTRIBUTES).filter(([name]) => name !== firstName);
    expect(creates.map((c) => [c[c.indexOf('--name') + 1], c[c.indexOf('--type') + 1]])).toEqual(missing);
    expect(calls.filter((c) => c[1] === 'namespace' && c[2] === 'create')).toEqual([
      ['operator', 'namespace', 'create', '--address', 'temporal:7233', '--namespace', 'default'],
    ]);
  });

  it('starts the consumer through the CLI, and counts an already running consumer as success', async () => {
    const svc = service('consumer-start');
    const script = scriptOnHost(svc, svc.command?.at(-1) ?? '');
    // What the CLI prints when the consumer already runs (the real command, a client failing like the server).
    const err: string[] = [];
    const code = await main(
      ['start', '--consumer', 'main', '--start', 'live_cut'],
      {},
      {
        out: () => undefined,
        err: (text) => void err.push(text),
      },
    );
    expect(code).toBe(1);
    const cliRun = (stdoutLine: string, exitCode: number) => {
      const stubs = stubCommands({ node: `echo '${stdoutLine.replaceAll("'", "'\\''")}' >&2\nexit ${exitCode}` });
      stubDirs.push(stubs.path);
      const env = Object.fromEntries(
        Object.entries(svc.environment ?? {}).map(([k, v]): [string, string] => [k, v ?? '']),
      );
      return { result: runScript(script, stubs.path, env), calls: stubs.calls('node') };
    };

    const alreadyRunning = cliRun(err.join('\n'), 1);
    expect(alreadyRunning.result.status, alreadyRunning.result.stdout).toBe(0);
    expect(alreadyRunning.result.stdout).toContain('already running; nothing to start');
    expect(alreadyRunning.calls).toEqual([
      ['dist/cli/main.js', 'start', '--consumer', 'main', '--start', 'live_cut', '--filter', '{}'],
    ]);

    const unreachable = cliRun('error (temporal_unavailable): cannot reach Temporal at temporal:7233', 1);
    expect(unreachable.result.status).toBe(1);
    const usage = cliRun('error: start: --filter is not valid JSON', 2);
    expect(usage.result.status).toBe(2);
    expect(cliRun('started consumer main', 0).result.status).toBe(0);
  });

  it('refuses to render without the stream URL and API key', () => {
    composeVersion();
    const result = dockerCompose(['config'], composeEnv({}));
    expect(result.status).not.toBe(0);
    expect(result.stderr).toContain('WHALEHUNT_URL');
  });
});
