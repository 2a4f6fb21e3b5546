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
