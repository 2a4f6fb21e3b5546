// The production path end to end: the compiled worker process (`node dist/worker/main.js`, no WORKFLOW_BUNDLE_PATH,
// so the workflow bundle its build wrote) and the compiled CLI (`node dist/cli/main.js`) against the run's Temporal
// dev server, Postgres and the reference stream: start, the consumer commits to the head, status and list report it,
// and SIGTERM drains the worker to exit 0.
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../worker/build-info.js';
import { consumerWorkflowId } from '../../workflows/definitions.js';
import { ReferenceStreamServer } from '../../simulator/server.js';
import { runCli } from '../support/cli.js';
import { useTestDatabase } from '../support/db.js';
import { stopChildProcess, useResources } from '../support/leaks.js';
import { createTestClient, temporalTarget, uniqueTaskQueue, waitFor } from '../support/temporal.js';
import { logLinesWith, nonJsonLines, spawnWorker } from '../support/worker-process.js';
import { API_KEY, journalOf, testWorkerEnv, trade, within } from './consumer-harness.js';

const db = useTestDatabase();

describe('the compiled worker and CLI', () => {
  const res = useResources();

  it('stream a consumer started and reported through them, on the prebuilt workflow bundle', async () => {
    const consumerId = 'compiled-1';
    const journal = journalOf([1, 2, 3, 4, 5].map((i) => ({ events: [trade(`p${i}`, 'mA', '0.5', '2')] })));
    const server = res.track(
      await ReferenceStreamServer.start({ journal, apiKeys: [API_KEY], checkpointEvery: 1 }),
      (s) => s.close(),
      'reference stream',
    );
    const taskQueue = uniqueTaskQueue('compiled');
    const worker = spawnWorker({
      ...testWorkerEnv({ databaseUrl: db.url, taskQueue, streamUrl: server.url, apiKey: API_KEY }),
      LOG_LEVEL: 'INFO',
    });
    res.track(worker.child, (c) => stopChildProcess(c), 'compiled worker process');
    const running = await waitFor(() => Promise.resolve(logLinesWith(worker, 'worker running')[0]), {
      description: 'the compiled worker to poll',
      timeoutMs: 60_000,
    }).catch((error: Error) => {
      throw new Error(`${error.message}\nstdout:\n${worker.lines.join('\n')}\nstderr:\n${worker.stderr.join('\n')}`);
    });
    expect(running).toMatchObject({ taskQueue, workflows: join(PACKAGE_ROOT, 'dist/workflow-bundle.js') });

    const cliEnv = {
      TEMPORAL_ADDRESS: temporalTarget().address,
      TEMPORAL_NAMESPACE: temporalTarget().namespace,
      TASK_QUEUE: taskQueue,
      DATABASE_URL: db.url,
    };
    const started = await runCli(
      cliEnv,
      'start',
      '--consumer',
      consumerId,
      '--start',
      'from_floor',
      '--lease-ms',
      '3000',
    );
    expect(started, started.stderr).toMatchObject({ code: 0 });
    expect(started.stdout).toContain(`started consumer ${consumerId}`);
    const testClient = res.track(await createTestClient());
    const handle = res.track(
      testClient.client.workflow.getHandle(consumerWorkflowId(consumerId)),
      async (h) => void (await h.terminate('test finished')),
      `workflow ${consumerWorkflowId(consumerId)}`,
    );
    await within(
      server.waitForAck((ack) => ack.consumerId === consumerId && ack.position === 5),
      60_000,
      'the ACK of position 5',
    );

    const status = await runCli(cliEnv, 'status', '--consumer', consumerId);
    expect(status, status.stderr).toMatchObject({ code: 0 });
    expect(status.stdout).toMatch(/phase\s+streaming/);
    expect(status.stdout).toMatch(/position\s+5\s/);
    expect(status.stdout).toMatch(/executions\s+5\s+markets 1\s+volume 5 USD/);
    const listed = await runCli(cliEnv, 'list', '--consumer', consumerId, '--json');
    expect(listed, listed.stderr).toMatchObject({ code: 0 });
    expect(listed.stdout).toContain(consumerWorkflowId(consumerId));

    await res.close(handle);
    worker.child.kill('SIGTERM');
    expect(await worker.exited, worker.stderr.join('\n')).toEqual({ code: 0, signal: null });
    await res.close(worker.child);
    expect(logLinesWith(worker, 'worker stopped')).toHaveLength(1);
    expect(nonJsonLines(worker)).toEqual([]);
    await res.close(testClient);
    await res.close(server);
  });
});
