// The exact operator commands shown in Current Details. The CLI (cli/main.ts) implements these names and
// flags; keep both in step so a stopped consumer always shows a command that works when pasted.
import type { BindingDecision, GapDecision, QuarantineDecision } from '../activities/types.js';

const CLI = 'npx tsx cli/main.ts';

/** Quotes an argument for a POSIX shell only when it needs it. */
function shellArg(value: string): string {
  return /^[\w@%+=:,./-]+$/.test(value) ? value : `'${value.replace(/'/g, `'\\''`)}'`;
}

/** Every command ends with who decides and why (both land in the audit row); the shell fills in the user. */
function command(name: string, consumerId: string, decision: string | null): string {
  return [
    CLI,
    name,
    '--consumer',
    shellArg(consumerId),
    ...(decision === null ? [] : ['--decision', decision]),
    '--actor',
    '"$USER"',
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
