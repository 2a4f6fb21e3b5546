// Decisions from the Temporal UI alone: a waiting consumer's (and backfill's) Current Details names, beside each CLI
// command, the update (or, for resume, the signal) and the JSON to paste as its Data. What it shows is checked
// against the workflows' own handlers: the name is the registered one, each line as shown is refused (nobody
// decides as "" for an empty reason), and the same line with `actor` and `reason` filled in is accepted by the same
// validator the CLI's update goes through, for exactly the decisions the CLI offers.
import { describe, expect, it } from 'vitest';
import type { DecisionAudit } from '../../activities/types.js';
import { emptyCounters } from '../../activities/types.js';
import { BackfillInbox } from '../../workflows/backfill-inbox.js';
import { BackfillState } from '../../workflows/backfill-state.js';
import { DETAILS_CODE_WIDTH } from '../../workflows/commands.js';
import { ConsumerInbox, type InboxEffects } from '../../workflows/consumer-inbox.js';
import { ConsumerState } from '../../workflows/consumer-state.js';
import {
  resolveBindingUpdate,
  resolveGapUpdate,
  resolveQuarantineUpdate,
  resumeSignal,
  type BackfillPhase,
  type ConsumerPhase,
} from '../../workflows/definitions.js';
import { InvalidOperatorInput } from '../../workflows/validation.js';

const SINCE = '2026-01-01T00:00:00.000Z';
const effects: InboxEffects = { interruptRun: () => undefined, publish: () => undefined, warn: () => undefined };
const filled = (line: string): Record<string, unknown> => ({
  ...(JSON.parse(line) as Record<string, unknown>),
  actor: 'ana',
  reason: 'positions 5-6 expired upstream',
});

/** The UI block of Current Details, read the way an operator reads it. */
function uiBlock(details: string): { action: string; name: string; inputs: string[] } {
  const intro =
    /From this UI: \*\*More Actions → (Send an Update|Send a Signal)\*\*, (?:Name|Signal name) `(\w+)`/.exec(details);
  if (!intro) throw new Error(`no UI block in:\n${details}`);
  const json = /```json\n([\s\S]*?)\n```/.exec(details.slice(intro.index));
  return { action: intro[1]!, name: intro[2]!, inputs: json![1]!.split('\n') };
}

/** The decisions the CLI commands of the same Current Details offer. */
function cliDecisions(details: string): string[] {
  return [...details.matchAll(/--decision (\w+)/g)].map(([, decision]) => decision!);
}

function consumerIn(phase: ConsumerPhase) {
  const state = new ConsumerState({
    consumerId: 'gap-1',
    subscriptionId: 's1',
    filter: {},
    initialStart: 'from_floor',
    carried: {
      committed: null,
      phase,
      pendingRebind: null,
      stop: null,
      lastError: null,
      counters: emptyCounters(),
      runs: 1,
    },
  });
  state.stopFor(phase, 'why it stopped', SINCE);
  return { details: state.details(Date.parse(SINCE)), state, inbox: new ConsumerInbox(state, effects) };
}

function backfillIn(phase: BackfillPhase) {
  const state = new BackfillState({ consumerId: 'bf', filter: {} });
  state.stopFor(phase, 'why it stopped', SINCE);
  return { details: state.details(null), state, inbox: new BackfillInbox(state, effects) };
}

/** Every line as shown is refused by `validate`; filled in, each is accepted. */
function expectValidatedLikeTheCli(inputs: string[], validate: (input: never) => void): void {
  for (const line of inputs) {
    expect(() => validate(JSON.parse(line) as never)).toThrow(InvalidOperatorInput);
    expect(() => validate(JSON.parse(line) as never)).toThrow(/actor is required.*reason is required/);
    expect(() => validate(filled(line) as never)).not.toThrow();
  }
}

describe('Current Details: decisions from the Temporal UI', () => {
  it('a gap stop: resolveGapUpdate with one line per decision the CLI offers, validated as the CLI update is', () => {
    const { details, inbox } = consumerIn('awaiting_gap_decision');
    const ui = uiBlock(details);
    expect(ui).toEqual({
      action: 'Send an Update',
      name: resolveGapUpdate.name,
      inputs: [
        '{"decision":"from_floor","actor":"","reason":""}',
        '{"decision":"live_cut","actor":"","reason":""}',
        '{"decision":"abandon","actor":"","reason":""}',
      ],
    });
    expect(ui.inputs.map((line) => JSON.parse(line) as { decision: string }).map((i) => i.decision)).toEqual(
      cliDecisions(details),
    );
    expectValidatedLikeTheCli(ui.inputs, (input) => inbox.validateGap(input));
    // Beside the commands, not instead of them; the CLI's stays first.
    expect(details.indexOf('```sh')).toBeLessThan(details.indexOf('From this UI'));
  });

  it('a binding stop and a quarantine stop name their updates; quarantine says how to decide only some events', () => {
    const binding = consumerIn('awaiting_binding_decision');
    const bindingUi = uiBlock(binding.details);
    expect(bindingUi.name).toBe(resolveBindingUpdate.name);
    expect(bindingUi.inputs.map((line) => (JSON.parse(line) as { decision: string }).decision)).toEqual(
      cliDecisions(binding.details),
    );
    expectValidatedLikeTheCli(bindingUi.inputs, (input) => binding.inbox.validateBinding(input));

    const quarantine = consumerIn('awaiting_quarantine_decision');
    const quarantineUi = uiBlock(quarantine.details);
    expect(quarantineUi.name).toBe(resolveQuarantineUpdate.name);
    expect(quarantineUi.inputs.map((line) => (JSON.parse(line) as { decision: string }).decision)).toEqual(
      cliDecisions(quarantine.details),
    );
    expectValidatedLikeTheCli(quarantineUi.inputs, (input) => quarantine.inbox.validateQuarantine(input));
    expect(quarantine.details).toContain('add `"eventIds":["…"]` to decide only those');
    expect(() =>
      quarantine.inbox.validateQuarantine({ ...filled(quarantineUi.inputs[0]!), eventIds: ['e1'] } as never),
    ).not.toThrow();
  });

  it('paused: the resume signal, whose empty audit is ignored and shown as the last error', () => {
    const { details, inbox, state } = consumerIn('paused');
    const ui = uiBlock(details);
    expect(ui).toEqual({ action: 'Send a Signal', name: resumeSignal.name, inputs: ['{"actor":"","reason":""}'] });
    inbox.ignoreInvalid('resume', () => inbox.requestResume(JSON.parse(ui.inputs[0]!) as DecisionAudit));
    expect(inbox.takeResume()).toBeNull();
    expect(state.lastError).toMatch(/ignored resume signal: .*actor is required/);
    inbox.requestResume(filled(ui.inputs[0]!) as unknown as DecisionAudit);
    expect(inbox.takeResume()).toEqual({ actor: 'ana', reason: 'positions 5-6 expired upstream' });
  });

  it('a backfill: the same updates, without the live cut it refuses', () => {
    const gap = backfillIn('awaiting_gap_decision');
    const ui = uiBlock(gap.details);
    expect(ui).toEqual({
      action: 'Send an Update',
      name: resolveGapUpdate.name,
      inputs: ['{"decision":"from_floor","actor":"","reason":""}', '{"decision":"abandon","actor":"","reason":""}'],
    });
    expectValidatedLikeTheCli(ui.inputs, (input) => gap.inbox.validateGap(input));
    const quarantine = backfillIn('awaiting_quarantine_decision');
    expect(uiBlock(quarantine.details).name).toBe(resolveQuarantineUpdate.name);
    expect(uiBlock(backfillIn('paused').details).name).toBe(resumeSignal.name);
  });

  it('no UI block outside the waiting phases, and every code line fits the panel', () => {
    expect(consumerIn('streaming').details).not.toContain('From this UI');
    for (const phase of [
      'awaiting_gap_decision',
      'awaiting_binding_decision',
      'awaiting_quarantine_decision',
    ] as const) {
      const code = consumerIn(phase)
        .details.split('```')
        .filter((_, i) => i % 2 === 1);
      for (const line of code.join('\n').split('\n')) expect(line.length).toBeLessThanOrEqual(DETAILS_CODE_WIDTH);
    }
  });
});
