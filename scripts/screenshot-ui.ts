// Screenshots of the consumer in the Temporal Web UI, for the README:
//   npx tsx scripts/screenshot-ui.ts [--out docs/ui]
// Starts everything it needs and stops it again: a scratch database on DATABASE_URL's server (default
// postgres://postgres@127.0.0.1:5432/test), a Temporal dev server with its Web UI on free ports, the reference
// stream server, an in-process worker and two consumers, one streaming and one stopped at a gap decision, which
// the last shots resolve from the UI (More Actions → Send an Update, as test/e2e/ui-decisions.test.ts does), and a
// maintenance run (maintenanceWorkflow, as its schedule starts one) with its report in Current Details.
// Chromium (CHROMIUM_PATH, default /usr/bin/chromium) runs headless; every shot waits for the rendered text it
// shows, since the UI fetches and renders after load (and --virtual-time-budget hangs on the detail page).
import { randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { Client, Connection, type WorkflowHandle } from '@temporalio/client';
import { NativeConnection } from '@temporalio/worker';
import pg from 'pg';
import type { Browser, Frame } from 'puppeteer-core';
import { createPool, migrate } from '../db/index.js';
import { Journal } from '../simulator/journal.js';
import { ReferenceStreamServer } from '../simulator/server.js';
import { loadConfig } from '../worker/config.js';
import { startLocalServices } from '../worker/local-services.js';
import { JsonLogger } from '../worker/logger.js';
import { installRuntime } from '../worker/main.js';
import { createWorker } from '../worker/worker.js';
import type { consumerWorkflow } from '../workflows/consumer.js';
import type { maintenanceWorkflow } from '../workflows/maintenance.js';
import {
  consumerIdSearchAttribute,
  consumerWorkflowId,
  kindSearchAttribute,
  MAINTENANCE_KIND,
  MAINTENANCE_WORKFLOW_ID_PREFIX,
  pauseSignal,
  phaseSearchAttribute,
  resumeSignal,
  statusQuery,
  type ConsumerStatus,
} from '../workflows/definitions.js';
import { freePort } from './free-port.js';
import {
  currentDetails,
  enterUpdateData,
  launchChromium,
  openUpdateDialog,
  renderedUiDecision,
  submitUpdate,
  VIEWPORT,
  workflowPage,
} from './temporal-ui.js';

const ADMIN_DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const NAMESPACE = 'default';
const WAIT_MS = 90_000;
const LIVE_CONSUMER = 'demo-live';
const GAP_CONSUMER = 'demo-gap';

type ConsumerHandle = WorkflowHandle<typeof consumerWorkflow>;

const log = (line: string): void => void process.stderr.write(`screenshot-ui: ${line}\n`);

/** Stops, newest first; each runs even if an earlier one failed. Runs once, however often it is asked to. */
class Teardown {
  private readonly steps: { what: string; run: () => Promise<unknown> }[] = [];
  private running: Promise<void> | null = null;
  add(what: string, run: () => Promise<unknown>): void {
    this.steps.push({ what, run });
  }
  run(): Promise<void> {
    return (this.running ??= (async () => {
      for (const step of this.steps.reverse()) {
        await step.run().catch((error: unknown) => log(`stopping ${step.what} failed: ${String(error)}`));
      }
    })());
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({ options: { out: { type: 'string', default: 'docs/ui' } } });
  const outDir = resolve(values.out);
  const teardown = new Teardown();
  // Ctrl-C stops what was started too (the scratch database would outlive the process otherwise). The handler
  // stays installed: a terminal's Ctrl-C arrives twice (the group's signal and tsx relaying it), and a signal with
  // no listener left would end the process before the teardown finishes.
  const onSignal = (signal: NodeJS.Signals): void => {
    log(`${signal}: stopping what was started`);
    void teardown.run().finally(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    const shots = await withStack(teardown, outDir);
    for (const shot of shots) log(`wrote ${shot}`);
  } finally {
    await teardown.run();
  }
}

async function withStack(teardown: Teardown, outDir: string): Promise<string[]> {
  const databaseUrl = await createScratchDatabase(teardown);
  const pool = createPool(databaseUrl);
  teardown.add('the pool', () => pool.end());
  await migrate(pool);

  const dataDir = await mkdtemp(join(tmpdir(), 'whalehunt-ui-'));
  teardown.add('the data directory', () => rm(dataDir, { recursive: true, force: true }));
  // A dev server of our own even if TEMPORAL_ADDRESS names one: the shots need its Web UI.
  const { TEMPORAL_ADDRESS: _external, ...env } = process.env;
  const services = await startLocalServices({
    dataDir,
    databaseUrl,
    temporalPort: await freePort(),
    temporalUiPort: await freePort(),
    env,
    log: (line) => log(line),
  });
  teardown.add('the Temporal dev server', () => services.stop());
  const uiUrl = services.temporal.uiUrl!;

  const apiKey = `ui-demo-${randomUUID()}`;
  const journal = Journal.generate({ seed: 42, transitions: 120 });
  const server = await ReferenceStreamServer.start({ journal, apiKeys: [apiKey], checkpointEvery: 20 });
  teardown.add('the reference stream server', () => server.close());

  const taskQueue = `whalehunt-ui-${randomUUID()}`;
  const config = loadConfig({
    DATABASE_URL: databaseUrl,
    TEMPORAL_ADDRESS: services.temporal.address,
    TEMPORAL_NAMESPACE: NAMESPACE,
    TASK_QUEUE: taskQueue,
    WHALEHUNT_URL: server.url,
    WHALEHUNT_API_KEY: apiKey,
    LOG_LEVEL: 'WARN',
  });
  const workerLog = new JsonLogger({
    level: 'WARN',
    secrets: [apiKey],
    write: (line) => void process.stderr.write(line),
  });
  installRuntime(workerLog);
  const clientConnection = await Connection.connect({ address: services.temporal.address });
  teardown.add('the client connection', () => clientConnection.close());
  const client = new Client({ connection: clientConnection, namespace: NAMESPACE });
  // Registered before the worker so that it stops first: terminating a workflow under a running lease leaves the
  // worker completing an activity of a finished workflow (a warning, nothing worse, but noise).
  const consumers: ConsumerHandle[] = [];
  teardown.add('the consumer workflows', async () => {
    for (const handle of consumers) {
      if ((await handle.describe()).status.name === 'RUNNING') await handle.terminate('screenshots taken');
    }
  });
  const workerConnection = await NativeConnection.connect({ address: services.temporal.address });
  teardown.add('the worker connection', () => workerConnection.close());
  log('bundling workflows/ and starting the worker');
  const worker = await createWorker({ config, pool, connection: workerConnection, log: workerLog });
  const running = worker.run();
  teardown.add('the worker', async () => {
    await worker.shutdown();
    await running;
  });

  const startConsumer = async (consumerId: string): Promise<ConsumerHandle> => {
    const handle = await client.workflow.start<typeof consumerWorkflow>('consumerWorkflow', {
      taskQueue,
      workflowId: consumerWorkflowId(consumerId),
      // Short leases: each run's end refreshes Current Details, so the shots show counts, not "none committed".
      args: [
        { consumerId, subscriptionId: `sub-${consumerId}`, filter: {}, initialStart: 'from_floor', leaseMs: 3_000 },
      ],
      typedSearchAttributes: [
        { key: consumerIdSearchAttribute, value: consumerId },
        { key: phaseSearchAttribute, value: 'streaming' },
      ],
    });
    consumers.push(handle);
    return handle;
  };

  const live = await startConsumer(LIVE_CONSUMER);
  const gap = await startConsumer(GAP_CONSUMER);
  const replayedHead = journal.head;
  await server.waitForAck((a) => a.consumerId === GAP_CONSUMER && a.position >= replayedHead);

  // The gap consumer, paused, misses transitions that then fall below the retention floor (a cursor expiry).
  await gap.signal(pauseSignal, { actor: 'ops', reason: 'maintenance window' });
  await waitForStatus(gap, 'phase paused', (s) => s.phase === 'paused');
  for (let i = 0; i < 4; i++) journal.appendGenerated();
  // The live consumer commits past the new floor first, so only the gap consumer's token expires.
  await server.waitForAck((a) => a.consumerId === LIVE_CONSUMER && a.position >= journal.head);
  journal.setRetentionFloor(replayedHead + 3);
  await gap.signal(resumeSignal, { actor: 'ops', reason: 'maintenance over' });
  await waitForStatus(gap, 'phase awaiting_gap_decision', (s) => s.phase === 'awaiting_gap_decision');
  // Current Details is refreshed as a streaming run ends: wait for one that saw the live transitions.
  await waitForStatus(live, 'a finished streaming run', (s) => s.phase === 'streaming' && s.runs >= 2);
  await waitForCount(client, `WhalehuntPhase = "awaiting_gap_decision"`);
  await waitForCount(client, `WhalehuntPhase = "streaming"`);

  log(`Temporal Web UI at ${uiUrl}; taking screenshots`);
  await mkdir(outDir, { recursive: true });
  const browser = await launchChromium();
  teardown.add('Chromium', () => browser.close());
  // A maintenance run as the schedule starts one: the live consumer's sessions since the floor moved saved it.
  const maintenance = await client.workflow.start<typeof maintenanceWorkflow>('maintenanceWorkflow', {
    taskQueue,
    workflowId: `${MAINTENANCE_WORKFLOW_ID_PREFIX}ui-${randomUUID()}`,
    args: [{ requestedBy: 'ops (whalehunt-consumer maintenance)' }],
    typedSearchAttributes: [
      { key: kindSearchAttribute, value: MAINTENANCE_KIND },
      { key: phaseSearchAttribute, value: 'maintaining' },
    ],
  });
  await maintenance.result();
  return takeShots(browser, uiUrl, outDir, { live, gap, maintenance });
}

/** One PNG per view; each waits for the text it exists to show. Returns the files written. */
async function takeShots(
  browser: Browser,
  uiUrl: string,
  outDir: string,
  consumers: { live: ConsumerHandle; gap: ConsumerHandle; maintenance: WorkflowHandle },
): Promise<string[]> {
  const page = await browser.newPage();
  const written: string[] = [];
  const shoot = async (name: string): Promise<void> => {
    const path = join(outDir, `${name}.png`);
    await page.screenshot({ path });
    written.push(path);
  };
  const pageOf = async (handle: WorkflowHandle, tab: Parameters<typeof workflowPage>[2]): Promise<string> =>
    workflowPage(
      uiUrl,
      { namespace: NAMESPACE, workflowId: handle.workflowId, runId: (await handle.describe()).runId },
      tab,
    );

  const query = `WhalehuntPhase = "awaiting_gap_decision"`;
  await page.goto(`${uiUrl}/namespaces/${NAMESPACE}/workflows?query=${encodeURIComponent(query)}`);
  await page.waitForSelector(`::-p-text(${consumers.gap.workflowId})`);
  await shoot('workflows-by-phase');

  await page.goto(await pageOf(consumers.live, 'user-metadata'));
  const liveHeading = `${LIVE_CONSUMER}: streaming`;
  log(describeFit(liveHeading, await measureFit(await currentDetails(page, liveHeading))));
  await shoot('current-details-streaming');

  await page.goto(await pageOf(consumers.gap, 'user-metadata'));
  const gapHeading = `${GAP_CONSUMER}: awaiting_gap_decision`;
  const gapDetails = await currentDetails(page, gapHeading);
  const decision = await renderedUiDecision(gapDetails);
  await shoot('current-details-gap-decision');
  log(describeFit(gapHeading, await measureFit(gapDetails)));

  await page.goto(await pageOf(consumers.gap, 'search-attributes'));
  await page.waitForSelector('::-p-text("WhalehuntPhase": "awaiting_gap_decision")');
  await shoot('search-attributes');

  // The decision from the UI alone, with the name and a line Current Details shows: as shown (refused), then filled
  // in (accepted). From the History tab: the User Metadata tab takes a typed "r" as its reload key.
  const fromFloor = decision.inputs.find((line) => line.includes('"from_floor"'));
  if (fromFloor === undefined)
    throw new Error(`Current Details offers no from_floor line: ${decision.inputs.join(' ')}`);
  const history = await pageOf(consumers.gap, 'history');
  await page.goto(history);
  await openUpdateDialog(page, decision.name);
  await enterUpdateData(page, fromFloor);
  const refusal = await submitUpdate(page, decision.name);
  if (!('refused' in refusal)) throw new Error('the unedited line was accepted');
  await shoot('ui-update-refused');
  await page.goto(history);
  await openUpdateDialog(page, decision.name);
  const filled = { ...(JSON.parse(fromFloor) as object), actor: 'ana', reason: 'positions expired upstream; accept' };
  await enterUpdateData(page, JSON.stringify(filled));
  await shoot('ui-update-dialog');
  if (!('accepted' in (await submitUpdate(page, decision.name)))) throw new Error('the filled-in line was refused');
  await shoot('ui-update-result');
  await page.goto(await pageOf(consumers.gap, 'user-metadata'));
  await currentDetails(page, `${GAP_CONSUMER}: streaming`);
  await shoot('current-details-after-ui-decision');

  await page.goto(await pageOf(consumers.maintenance, 'user-metadata'));
  await currentDetails(page, 'Maintenance: maintained');
  await shoot('current-details-maintenance');
  return written;
}

interface DetailsFit {
  /** The iframe Current Details renders in, as the page lays it out. */
  frameWidth: number;
  frameHeight: number;
  /** Inside the iframe: the width before a line is cut, and the rendered content's height. */
  viewportWidth: number;
  contentHeight: number;
  /** The resolving commands (the code block): one monospace character's width, where lines start, each line. */
  charWidth: number;
  codeLeft: number;
  lineWidths: number[];
}

async function measureFit(frame: Frame): Promise<DetailsFit> {
  const frameBox = await (await frame.frameElement())!.boundingBox();
  // A string, not a function: the project compiles without the DOM library.
  const inner = (await frame.evaluate(`(() => {
    const code = document.querySelector('pre code') ?? document.querySelector('pre');
    const lines = code ? code.textContent.replace(/\\n$/, '').split('\\n') : [];
    const probe = document.createElement('span');
    probe.textContent = 'x'.repeat(100);
    code?.appendChild(probe);
    const charWidth = code ? probe.getBoundingClientRect().width / 100 : 0;
    probe.remove();
    return {
      viewportWidth: document.documentElement.clientWidth,
      contentHeight: document.documentElement.scrollHeight,
      charWidth,
      codeLeft: code ? code.getBoundingClientRect().left : 0,
      lineWidths: lines.map((line) => line.length * charWidth),
    };
  })()`)) as Omit<DetailsFit, 'frameWidth' | 'frameHeight'>;
  return { frameWidth: frameBox?.width ?? 0, frameHeight: frameBox?.height ?? 0, ...inner };
}

/** One line for the log: whether the resolving commands and the whole panel fit without scrolling. */
function describeFit(heading: string, fit: DetailsFit): string {
  const px = (n: number): string => `${Math.round(n)} px`;
  const parts = [
    `${heading}: Current Details at ${VIEWPORT.width} px is an iframe of ${px(fit.frameWidth)} x ${px(fit.frameHeight)};`,
  ];
  if (fit.lineWidths.length > 0) {
    const room = fit.viewportWidth - fit.codeLeft;
    const longest = Math.max(...fit.lineWidths);
    const chars = (n: number): number => Math.floor(n / fit.charWidth);
    parts.push(
      `a command line has ${px(room)} (${chars(room)} monospace characters of ${fit.charWidth.toFixed(2)} px),`,
      `the longest is ${px(longest)} (${chars(longest)} characters):`,
      longest > room ? `CUT OFF after ${chars(room)} characters;` : 'it fits;',
    );
  }
  const hidden = fit.contentHeight - fit.frameHeight;
  parts.push(
    hidden > 0
      ? `the last ${px(hidden)} of ${px(fit.contentHeight)} are below the frame`
      : 'nothing is below the frame',
  );
  return parts.join(' ');
}

/** Polls the status query until it matches (a running consumer answers within a workflow task). */
async function waitForStatus(
  handle: ConsumerHandle,
  description: string,
  predicate: (status: ConsumerStatus) => boolean,
): Promise<ConsumerStatus> {
  return poll(description, async () => {
    const status = await handle.query(statusQuery);
    return predicate(status) ? status : null;
  });
}

/** Waits until visibility (what the UI's list reads) has caught up with the query. */
async function waitForCount(client: Client, query: string): Promise<void> {
  await poll(`a workflow matching ${query}`, async () =>
    (await client.workflow.count(query)).count > 0 ? true : null,
  );
}

async function poll<T>(description: string, attempt: () => Promise<T | null>): Promise<T> {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const result = await attempt();
    if (result !== null) return result;
    if (Date.now() > deadline) throw new Error(`timed out after ${WAIT_MS} ms waiting for ${description}`);
    await new Promise((resolveDelay) => setTimeout(resolveDelay, 250));
  }
}

/**
 * A database of its own, dropped at the end. A run killed outright (tsx SIGKILLs a child that is too busy to take
 * Ctrl-C in time, e.g. while bundling) leaves one behind: the next run drops those older than an hour.
 */
async function createScratchDatabase(teardown: Teardown): Promise<string> {
  const admin = async <R extends pg.QueryResultRow>(sql: string): Promise<R[]> => {
    const client = new pg.Client({ connectionString: ADMIN_DATABASE_URL });
    await client.connect();
    try {
      return (await client.query<R>(sql)).rows;
    } finally {
      await client.end();
    }
  };
  const prefix = 'whalehunt_ui_';
  const leftovers = await admin<{ datname: string }>(`SELECT datname FROM pg_database WHERE datname LIKE '${prefix}%'`);
  for (const { datname } of leftovers) {
    if (Date.now() - parseInt(datname.slice(prefix.length), 36) > 3_600_000) {
      await admin(`DROP DATABASE IF EXISTS ${datname} WITH (FORCE)`);
    }
  }
  const name = `${prefix}${Date.now().toString(36)}`;
  await admin(`CREATE DATABASE ${name}`);
  teardown.add(`database ${name}`, () => admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
  const url = new URL(ADMIN_DATABASE_URL);
  url.pathname = `/${name}`;
  return url.toString();
}

main().then(
  // Exit explicitly: everything was stopped, and native handles must not keep the process up.
  () => process.exit(0),
  (error: unknown) => {
    log(`failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    process.exit(1);
  },
);
