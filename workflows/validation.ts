// Synchronous validation of operator input, shared by update validators (which reject before anything
// reaches history) and signal handlers (which cannot reject, so they ignore and report). Hand-written rather
// than zod: these few checks are all the workflow bundle needs, and zod in it costs the worker ~16 MiB of
// resident memory (issue 22).
import { ApplicationFailure } from '@temporalio/common';
import { BINDING_DECISIONS, GAP_DECISIONS, QUARANTINE_DECISIONS } from '../domain/decisions.js';
import { blankNameProblems, checkFilter, isJsonObject, type InputProblem } from '../protocol/codec-filter.js';
import type { BindingResolution, GapResolution, QuarantineResolution, RebindRequest } from './definitions.js';

/**
 * Invalid operator input; the message lists every problem (never a value that could be a secret). An
 * ApplicationFailure, so that thrown from a handler or a workflow it fails the update or the workflow
 * instead of retrying the workflow task forever.
 */
export class InvalidOperatorInput extends ApplicationFailure {
  readonly code = 'invalid_operator_input';
  constructor(message: string) {
    super(message, 'InvalidOperatorInput', true);
  }
}

/** Reads one input object, collecting every problem before it throws, so that the operator fixes them at once. */
class InputReader {
  readonly problems: InputProblem[] = [];
  private readonly record: Record<string, unknown>;

  constructor(value: unknown) {
    if (!isJsonObject(value)) this.problems.push({ path: [], message: 'must be an object' });
    this.record = isJsonObject(value) ? value : {};
  }

  /** A field as given, for a check of its own. */
  field(key: string): unknown {
    return this.record[key];
  }

  /** A string that is not blank once trimmed, trimmed. */
  text(key: string, required: string): string {
    const value = this.record[key];
    if (typeof value === 'string' && value.trim().length > 0) return value.trim();
    this.problems.push({ path: [key], message: required });
    return '';
  }

  /** Absent, or a non-empty string. */
  optionalText(key: string): string | undefined {
    const value = this.record[key];
    if (value === undefined || (typeof value === 'string' && value.length > 0)) return value;
    this.problems.push({ path: [key], message: `${key}, when given, is a non-empty string` });
    return undefined;
  }

  oneOf<T extends string>(key: string, options: readonly T[]): T {
    const value = this.record[key];
    if (options.includes(value as T)) return value as T;
    const expected = options.map((option) => JSON.stringify(option)).join('|');
    this.problems.push({ path: [key], message: `Invalid option: expected one of ${expected}` });
    return options[0]!;
  }

  /** Absent, or a list of at least one non-empty string. */
  optionalNames(key: string, empty: string): string[] | undefined {
    const value = this.record[key];
    if (value === undefined) return undefined;
    if (!Array.isArray(value)) {
      this.problems.push({ path: [key], message: `${key}, when given, is a list of non-empty strings` });
      return undefined;
    }
    if (value.length === 0) this.problems.push({ path: [key], message: empty });
    this.problems.push(...blankNameProblems(value, [key]));
    return [...(value as string[])];
  }

  /** Throws InvalidOperatorInput naming every problem found, if any. */
  done<T>(what: string, value: T): T {
    if (this.problems.length === 0) return value;
    const problems = this.problems.map(({ path, message }) => `${path.join('.') || '(input)'}: ${message}`);
    throw new InvalidOperatorInput(`invalid ${what}: ${problems.join('; ')}`);
  }
}

function readAudit(input: InputReader): { actor: string; reason: string } {
  return {
    actor: input.text('actor', 'actor is required: who takes this decision'),
    reason: input.text('reason', 'reason is required: why this decision is taken'),
  };
}

export function parseGapResolution(value: unknown): GapResolution {
  const input = new InputReader(value);
  return input.done('gap resolution', { ...readAudit(input), decision: input.oneOf('decision', GAP_DECISIONS) });
}

export function parseBindingResolution(value: unknown): BindingResolution {
  const input = new InputReader(value);
  return input.done('binding resolution', {
    ...readAudit(input),
    decision: input.oneOf('decision', BINDING_DECISIONS),
  });
}

export function parseQuarantineResolution(value: unknown): QuarantineResolution {
  const input = new InputReader(value);
  const resolution: QuarantineResolution = {
    ...readAudit(input),
    decision: input.oneOf('decision', QUARANTINE_DECISIONS),
  };
  const eventIds = input.optionalNames('eventIds', 'eventIds, when given, names at least one event');
  return input.done('quarantine resolution', eventIds ? { ...resolution, eventIds } : resolution);
}

export function parseAudit(value: unknown): { actor: string; reason: string } {
  const input = new InputReader(value);
  return input.done('pause/resume request', readAudit(input));
}

export function parseRebindRequest(value: unknown): RebindRequest {
  const input = new InputReader(value);
  const checked = checkFilter(input.field('filter'));
  if (!checked.ok) input.problems.push(...checked.problems.map((p) => ({ ...p, path: ['filter', ...p.path] })));
  const requestedBy = input.text('requestedBy', 'requestedBy is required');
  const replyTo = input.optionalText('replyTo');
  const request: RebindRequest = { filter: checked.ok ? checked.filter : {}, requestedBy };
  return input.done('rebind request', replyTo === undefined ? request : { ...request, replyTo });
}
