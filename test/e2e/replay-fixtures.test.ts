// Recorded histories of real e2e runs (test/fixtures/histories, written with WHALEHUNT_RECORD_HISTORIES)
// replayed against today's workflow code: a change that would break running consumers fails here.
// Re-record them only for an intended, versioned change (patched()).
import { readdir, readFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from '@temporalio/worker';
import { describe, expect, it } from 'vitest';
import { sharedWorkflowBundlePath } from '../support/temporal.js';

const fixtures = resolve(dirname(fileURLToPath(import.meta.url)), '../fixtures/histories');

describe('recorded workflow histories', () => {
  it('replay without nondeterminism and hold no API key', async () => {
    const files = (await readdir(fixtures)).filter((f) => f.endsWith('.json')).sort();
    expect(files).toEqual([
      'backfill-held-quarantine.json',
      'backfill-pause-backoff.json',
      'backfill-tail-at-head.json',
      'backfill-target-handover.json',
      'consumer-gap-decision.json',
      'consumer-progress-pause.json',
      'consumer-rebind.json',
      'consumer-recurring-fault.json',
      'rebind-scheduled.json',
    ]);
    for (const file of files) {
      const text = await readFile(join(fixtures, file), 'utf8');
      expect(text).not.toMatch(/apiKey|wh-e2e-secret/);
      const history: unknown = JSON.parse(text);
      await Worker.runReplayHistory({ workflowBundle: { codePath: sharedWorkflowBundlePath() } }, history, file);
    }
  });
});
