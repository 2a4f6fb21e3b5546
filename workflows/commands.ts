// The exact operator commands shown in Current Details, and the same decisions as the Temporal UI sends them
// (More Actions → Send an Update / Send a Signal: a name and a JSON input). The CLI (cli/main.ts) implements these
// names and flags; keep both in step so a stopped consumer always shows a command that works when pasted.
import type { BindingDecision, GapDecision, QuarantineDecision } from '../activities/types.js';
import { formatTime } from '../protocol/progress.js';
import {
  resolveBindingUpdate,
  resolveGapUpdate,
  resolveQuarantineUpdate,
  resumeSignal,
  type ConsumerStop,
} from './definitions.js';

// The compiled CLI: it runs in the worker's image and in a built checkout (npm start builds).
const CLI = 'node dist/cli/main.js';

/** Quotes an argument for a POSIX shell only when it needs it. */
function shellArg(value: string): string {
  return /^[\w@%+=:,./-]+$/.test(value) ? value : `'${value.replace(/'/g, `'\\''`)}'`;
}

/**
 * Every command ends with why; the audit row records it with who decided: the OS user running the command unless
 * --actor names someone (no `--actor "$USER"`, which fails where USER is unset: cron, containers, CI).
 */
function command(name: string, consumerId: string, decision: string | null): string {
  return [
    CLI,
    name,
    '--consumer',
    shellArg(consumerId),
    ...(decision === null ? [] : ['--decision', decision]),
    '--reason',
    '"<why>"',
  ].join(' ');
}

export function resolveGapCommand(consumerId: string, decision: GapDecision): string {
  return command('resolve-gap', consumerId, decision);
}

export function resolveBindingCommand(consumerId: string, decision: BindingDecision): string {
  return command('resolve-binding', consumerId, decision);
}

export function resolveQuarantineCommand(consumerId: string, decision: QuarantineDecision): string {
  return command('resolve-quarantine', consumerId, decision);
}

export function resumeCommand(consumerId: string): string {
  return command('resume', consumerId, null);
}

/** A decision from the Temporal UI alone: the More Actions entry, the update's (or signal's) name, its inputs. */
export interface UiDecision {
  /** An update is validated before it reaches history (a wrong input is refused); resume exists as a signal only. */
  action: 'Send an Update' | 'Send a Signal';
  name: string;
  /** One JSON input per decision, on one line. `actor` and `reason` are left empty to be filled in: empty, refused. */
  inputs: string[];
}

/** How an operator resolves a stop: the CLI commands (one per decision) and the same decisions from the UI. */
export interface Resolution {
  commands: string[];
  ui: UiDecision;
}

/** A decision's input as the UI takes it. The audit fields are empty: refused as they are, never passed unedited. */
function uiInput(fields: Record<string, string>): string {
  return JSON.stringify({ ...fields, actor: '', reason: '' });
}

export function gapResolution(consumerId: string, decisions: readonly GapDecision[]): Resolution {
  return {
    commands: decisions.map((decision) => resolveGapCommand(consumerId, decision)),
    ui: {
      action: 'Send an Update',
      name: resolveGapUpdate.name,
      inputs: decisions.map((decision) => uiInput({ decision })),
    },
  };
}

export function bindingResolution(consumerId: string, decisions: readonly BindingDecision[]): Resolution {
  return {
    commands: decisions.map((decision) => resolveBindingCommand(consumerId, decision)),
    ui: {
      action: 'Send an Update',
      name: resolveBindingUpdate.name,
      inputs: decisions.map((decision) => uiInput({ decision })),
    },
  };
}

export function quarantineResolution(consumerId: string, decisions: readonly QuarantineDecision[]): Resolution {
  return {
    commands: decisions.map((decision) => resolveQuarantineCommand(consumerId, decision)),
    ui: {
      action: 'Send an Update',
      name: resolveQuarantineUpdate.name,
      inputs: decisions.map((decision) => uiInput({ decision })),
    },
  };
}

export function resumeResolution(consumerId: string): Resolution {
  return {
    commands: [resumeCommand(consumerId)],
    ui: { action: 'Send a Signal', name: resumeSignal.name, inputs: [uiInput({})] },
  };
}

/**
 * The decisions that end a waiting phase, from a shell and from the UI; null in the other phases. `gapDecisions`:
 * the gap decisions the workflow takes (a backfill has no live cut).
 */
export function stopResolution(
  consumerId: string,
  phase: ConsumerStop['phase'],
  gapDecisions: readonly GapDecision[],
): Resolution | null {
  switch (phase) {
    case 'awaiting_gap_decision':
      return gapResolution(consumerId, gapDecisions);
    case 'awaiting_binding_decision':
      return bindingResolution(consumerId, ['retry', 'from_floor', 'live_cut', 'abandon']);
    case 'awaiting_quarantine_decision':
      return quarantineResolution(consumerId, ['release_terminal', 'retry']);
    case 'paused':
      return resumeResolution(consumerId);
    default:
      return null;
  }
}

/** A stop in a waiting phase: why, the commands that resolve it (one a line), and since when. */
export function waitingStop(
  phase: ConsumerStop['phase'],
  reason: string,
  resolution: Resolution | null,
  since: string,
): ConsumerStop {
  return { phase, reason, resolveWith: resolution?.commands.join('\n') ?? '', since };
}

/**
 * Current Details of a stopped workflow, what to do first: why it waits, then the decisions from a shell (each
 * command wrapped to the panel's width) and from the UI alone (the update or signal by name, one JSON line per
 * decision).
 */
export function waitingDetails(stop: ConsumerStop, ui: UiDecision | null): string[] {
  const lines = ['', `**Waiting since ${formatTime(stop.since)}:** ${stop.reason}`];
  if (stop.resolveWith !== '') {
    const commands = stop.resolveWith.split('\n').map((command) => wrapShellCommand(command));
    lines.push('', 'From a shell:', '', '```sh', commands.join('\n'), '```');
  }
  if (ui !== null) {
    const update = ui.action === 'Send an Update';
    const data = ui.inputs.length === 1 ? 'Data this line' : 'Data one of these lines';
    const empty = update ? 'left empty, it is refused' : 'left empty, it is ignored (shown as the last error)';
    lines.push(
      '',
      `From this UI: **More Actions → ${ui.action}**, ${update ? 'Name' : 'Signal name'} \`${ui.name}\`, ${data} ` +
        `with \`actor\` (who decides) and \`reason\` (why) filled in; ${empty}:`,
      '',
      '```json',
      ...ui.inputs,
      '```',
    );
    if (ui.name === resolveQuarantineUpdate.name)
      lines.push('', 'That decides every held event; add `"eventIds":["…"]` to decide only those.');
  }
  return lines;
}

/** Code lines the Temporal UI's Current Details panel shows without scrolling sideways (README, docs/ui). */
export const DETAILS_CODE_WIDTH = 73;

/**
 * Wraps one command into lines of at most `width` characters that still paste as one command: each line but the
 * last ends in ` \` and the next is indented. A flag stays with its value; a word longer than a line stays whole.
 */
export function wrapShellCommand(command: string, width: number = DETAILS_CODE_WIDTH): string {
  const words = shellWords(command);
  const units: string[] = [];
  for (let i = 0; i < words.length; i += 1) {
    const word = words[i]!;
    const next = words[i + 1];
    if (word.startsWith('--') && next !== undefined && !next.startsWith('--')) {
      units.push(`${word} ${next}`);
      i += 1;
    } else units.push(word);
  }
  const lines: string[] = [];
  let line = '';
  for (const unit of units) {
    const indent = lines.length === 0 ? '' : '  ';
    // Room for the " \" that continues the line.
    if (line !== '' && indent.length + line.length + 1 + unit.length + 2 > width) {
      lines.push(`${indent}${line} \\`);
      line = unit;
    } else line = line === '' ? unit : `${line} ${unit}`;
  }
  lines.push(`${lines.length === 0 ? '' : '  '}${line}`);
  return lines.join('\n');
}

/** Splits a command at the spaces outside quotes (the commands above quote with '…', "…" and \'). */
function shellWords(command: string): string[] {
  const words: string[] = [];
  let word = '';
  let quote: "'" | '"' | null = null;
  let escaped = false;
  for (const char of command) {
    if (quote === null && !escaped && char === ' ') {
      if (word !== '') words.push(word);
      word = '';
      continue;
    }
    word += char;
    if (escaped) escaped = false;
    else if (char === '\\' && quote !== "'") escaped = true;
    else if (quote === null && (char === "'" || char === '"')) quote = char;
    else if (char === quote) quote = null;
  }
  if (word !== '') words.push(word);
  return words;
}
