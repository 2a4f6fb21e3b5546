// Replays the histories a test file recorded (consumer-harness.ts) against the current workflow bundle:
// a change that breaks determinism for running workflows fails here. Also checks that no history holds the
// stream API key, and no activity log line does.
import { Worker } from '@temporalio/worker';
import { expect } from 'vitest';
import { sharedWorkflowBundlePath } from '../support/temporal.js';
import { API_KEY, recordedHistories, recordedLogLines } from './consumer-harness.js';

export async function expectReplayable(): Promise<void> {
  expect(recordedHistories.length).toBeGreaterThan(0);
  const histories = recordedHistories.map(({ workflowId, history }) => ({ workflowId, history }));
  const failures: string[] = [];
  for await (const result of Worker.runReplayHistories(
    { workflowBundle: { codePath: sharedWorkflowBundlePath() } },
    histories,
  )) {
    if (result.error) failures.push(`${result.workflowId}: ${result.error.message}`);
  }
  expect(failures).toEqual([]);
  for (const { workflowId, history } of recordedHistories) {
    expect(JSON.stringify(history).includes(API_KEY), `history of ${workflowId} holds the API key`).toBe(false);
  }
  expect(recordedLogLines.filter((line) => line.includes(API_KEY))).toEqual([]);
}
