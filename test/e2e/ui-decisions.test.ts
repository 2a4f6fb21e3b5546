// An operator with only the Temporal Web UI resolves a gap stop: headless Chromium (Debian's chromium) opens the
// run's dev server UI, reads the update's name and JSON from the consumer's Current Details, and sends it through
// More Actions → Send an Update. The line as shown is refused by the same validator as the CLI's update; with
// `actor` and `reason` filled in it is accepted, audited, and the consumer leaves the waiting phase.
import { inject, describe, expect, it } from 'vitest';
import {
  currentDetails,
  enterUpdateData,
  launchChromium,
  openUpdateDialog,
  renderedUiDecision,
  submitUpdate,
  workflowPage,
} from '../../scripts/temporal-ui.js';
import { resolveGapUpdate } from '../../workflows/definitions.js';
import { useTestDatabase } from '../support/db.js';
import { useResources } from '../support/leaks.js';
import { journalOf, trade, waitForPhase, waitForStatus, withConsumerStack, within } from './consumer-harness.js';
import { expectReplayable } from './replay-check.js';

const db = useTestDatabase();

describe('decisions from the Temporal UI alone', () => {
  const res = useResources();

  it('a gap stop is resolved with the update name and JSON Current Details shows, through Send an Update', async () => {
    const journal = journalOf([1, 2, 3, 4].map((i) => ({ events: [trade(`u${i}`, 'mA', '0.5', '2')] })));
    await withConsumerStack(res, db, { journal }, async ({ server, startConsumer }) => {
      const handle = await startConsumer({ consumerId: 'ui-gap' });
      await within(
        server.waitForSubscription((s) => s.consumerId === 'ui-gap' && s.mode === 'resume'),
        60_000,
        'the resumed session',
      );
      // A rebuilt history: the next session is answered reset_required (history_rebuilt).
      journal.rebuildHistory();
      await waitForPhase(handle, 'awaiting_gap_decision');

      const browser = res.track(await launchChromium(), (b) => b.close(), 'Chromium');
      try {
        const page = await browser.newPage();
        const run = {
          namespace: inject('temporalNamespace'),
          workflowId: handle.workflowId,
          runId: (await handle.describe()).runId,
        };
        const detailsPage = workflowPage(inject('temporalUiUrl'), run, 'user-metadata');
        await page.goto(detailsPage);
        const shown = await renderedUiDecision(await currentDetails(page, 'ui-gap: awaiting_gap_decision'));
        expect(shown).toMatchObject({ action: 'Send an Update', name: resolveGapUpdate.name });
        const fromFloor = shown.inputs.find((line) => line.includes('"from_floor"'));
        expect(fromFloor).toBe('{"decision":"from_floor","actor":"","reason":""}');

        // Pasted as shown, it is refused before it reaches the workflow's history. (From the History tab: on the User
        // Metadata tab the UI takes a typed "r" as its reload key, even inside the dialog; a paste is not affected.)
        const historyPage = workflowPage(inject('temporalUiUrl'), run, 'history');
        await page.goto(historyPage);
        await openUpdateDialog(page, shown.name);
        await enterUpdateData(page, fromFloor!);
        const refusal = await submitUpdate(page, shown.name);
        expect('refused' in refusal && refusal.refused).toMatch(
          /^invalid gap resolution: actor: actor is required.*; reason: reason is required/,
        );
        const events = (await handle.fetchHistory()).events ?? [];
        expect(events.some((event) => event.workflowExecutionUpdateAcceptedEventAttributes)).toBe(false);

        // Filled in, it is the decision. (A fresh page, so that the answer awaited is not the refusal still shown.)
        await page.goto(historyPage);
        await openUpdateDialog(page, shown.name);
        const decision = {
          ...(JSON.parse(fromFloor!) as object),
          actor: 'ana',
          reason: 'the provider rebuilt its journal',
        };
        await enterUpdateData(page, JSON.stringify(decision));
        expect(await submitUpdate(page, shown.name)).toEqual({ accepted: true });
        const after = await waitForStatus(handle, 'the consumer leaving the gap stop', (s) => s.phase === 'streaming');
        expect(after.stop).toBeNull();
        // From the floor of the rebuilt history: the second from_floor session, which commits up to its cut.
        await within(
          server.waitForAck(
            (a) =>
              a.consumerId === 'ui-gap' &&
              a.position === 4 &&
              server.subscriptions.filter((s) => s.consumerId === 'ui-gap' && s.mode === 'from_floor').length === 2,
          ),
          60_000,
          'the ACK of checkpoint 4 in the rebuilt history',
        );
        // And the UI says so.
        await page.goto(detailsPage);
        await currentDetails(page, 'ui-gap: streaming');
      } finally {
        await res.close(browser);
      }
    });
    const { rows } = await db.pool.query<{ kind: string; decision: string; actor: string; reason: string }>(
      'SELECT kind, decision, actor, reason FROM decisions WHERE consumer_id = $1',
      ['ui-gap'],
    );
    expect(rows).toEqual([
      { kind: 'gap', decision: 'from_floor', actor: 'ana', reason: 'the provider rebuilt its journal' },
    ]);
  });

  it('replays every recorded history without nondeterminism and no history holds the API key', async () => {
    await expectReplayable();
  });
});
