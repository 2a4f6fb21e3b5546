// Synchronous validation of operator input, shared by update validators (which reject before anything
// reaches history) and signal handlers (which cannot reject, so they ignore and report). zod is pure and
// deterministic, so it is safe in the workflow sandbox.
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { BINDING_DECISIONS, GAP_DECISIONS, QUARANTINE_DECISIONS } from '../domain/decisions.js';
import { filterSchema } from '../protocol/codec.js';
import type { BindingResolution, GapResolution, QuarantineResolution, RebindRequest } from './definitions.js';

const audit = {
  actor: z.string().trim().min(1, 'actor is required: who takes this decision'),
  reason: z.string().trim().min(1, 'reason is required: why this decision is taken'),
};

const gapResolutionSchema = z.object({ ...audit, decision: z.enum(GAP_DECISIONS) });
const bindingResolutionSchema = z.object({ ...audit, decision: z.enum(BINDING_DECISIONS) });
const quarantineResolutionSchema = z.object({
  ...audit,
  decision: z.enum(QUARANTINE_DECISIONS),
  eventIds: z.array(z.string().min(1)).min(1, 'eventIds, when given, names at least one event').optional(),
});
const auditSchema = z.object(audit);
const rebindRequestSchema = z.object({
  filter: filterSchema,
  requestedBy: z.string().trim().min(1, 'requestedBy is required'),
  replyTo: z.string().min(1).optional(),
});

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

function parse<T>(schema: z.ZodType<T>, what: string, value: unknown): T {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const problems = result.error.issues.map((issue) => `${issue.path.join('.') || '(input)'}: ${issue.message}`);
  throw new InvalidOperatorInput(`invalid ${what}: ${problems.join('; ')}`);
}

export const parseGapResolution = (value: unknown): GapResolution =>
  parse(gapResolutionSchema, 'gap resolution', value);
export const parseBindingResolution = (value: unknown): BindingResolution =>
  parse(bindingResolutionSchema, 'binding resolution', value);
export const parseQuarantineResolution = (value: unknown): QuarantineResolution =>
  parse(quarantineResolutionSchema, 'quarantine resolution', value);
export const parseAudit = (value: unknown): { actor: string; reason: string } =>
  parse(auditSchema, 'pause/resume request', value);
export const parseRebindRequest = (value: unknown): RebindRequest =>
  parse(rebindRequestSchema, 'rebind request', value);
