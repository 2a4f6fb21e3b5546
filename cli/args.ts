// Argument parsing for `whalehunt-consumer <command>`: node:util parseArgs for the shape, zod for the
// values. Pure (no I/O), so every usage error is unit-tested. Usage errors name the command, the option
// and what was wrong; the process exits 2 on them (1 is for operational failures).
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { filterSchema, type StreamFilter } from '../protocol/codec.js';
import {
  BINDING_DECISIONS,
  GAP_DECISIONS,
  QUARANTINE_DECISIONS,
  type BindingDecision,
  type GapDecision,
  type QuarantineDecision,
} from '../domain/decisions.js';
import type { BackfillPhase, ConsumerPhase } from '../workflows/definitions.js';

export class CliUsageError extends Error {
  readonly code = 'usage';
  override readonly name = 'CliUsageError';
  constructor(
    message: string,
    /** The command whose help to point at, when known. */
    readonly command?: CommandName,
  ) {
    super(message);
  }
}

export const INITIAL_STARTS = ['live_cut', 'from_floor'] as const;
export const CONSUMER_PHASES = [
  'streaming',
  'backoff',
  'awaiting_gap_decision',
  'awaiting_binding_decision',
  'awaiting_quarantine_decision',
  'paused',
  'rebinding',
  'completed',
] as const satisfies readonly ConsumerPhase[];
/** What `list --phase` accepts: a stream consumer's phases and a backfill's. */
export const LIST_PHASES = [...CONSUMER_PHASES, 'backfilling', 'at_head', 'handing_over'] as const satisfies readonly (
  ConsumerPhase | BackfillPhase
)[];

/** What `alerts list --state` accepts: `sent` is the outbox status `done`; `pending` includes alerts being sent. */
export const ALERT_STATES = ['pending', 'dead', 'sent', 'suppressed', 'dropped'] as const;
export type AlertState = (typeof ALERT_STATES)[number];
export const DEFAULT_ALERTS_LIMIT = 50;
/** Which alerts a retry or drop covers: named outbox row ids, or every dead one (of one consumer, or all). */
export type AlertSelection = { ids: number[] } | { allDead: true; consumerId?: string };

// Ids end up in workflow ids and visibility queries; a conservative alphabet keeps both unambiguous.
const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
const idSchema = z.string().regex(ID_PATTERN, 'use 1-128 characters: letters, digits, ".", "_", ":", "-"');
const auditText = z.string().trim().min(1, 'must not be empty');
const durationSchema = z.string().regex(/^\d+(ms|s|m|h|d)$/, 'use a number with a unit, e.g. 30s, 15m, 6h, 1d');
const cronSchema = z
  .string()
  .trim()
  .refine((s) => s.split(/\s+/).length === 5, 'use a 5-field cron expression such as "0 * * * *"');

export type AuditArgs = { actor: string; reason: string };

export type CliCommand =
  | { command: 'help'; topic: CommandName | null }
  | {
      command: 'start';
      consumerId: string;
      subscriptionId: string;
      filter: StreamFilter;
      start: (typeof INITIAL_STARTS)[number];
      leaseMs: number | undefined;
    }
  | { command: 'status'; consumerId: string; json: boolean }
  | ({ command: 'resolve-gap'; consumerId: string; decision: GapDecision } & AuditArgs)
  | ({ command: 'resolve-binding'; consumerId: string; decision: BindingDecision } & AuditArgs)
  | ({
      command: 'resolve-quarantine';
      consumerId: string;
      decision: QuarantineDecision;
      eventIds: string[] | undefined;
    } & AuditArgs)
  | { command: 'rebind'; consumerId: string; filter: StreamFilter; actor: string }
  | {
      command: 'schedule-rebind';
      action: 'create';
      consumerId: string;
      scheduleId: string;
      filter: StreamFilter;
      timing: { cron: string } | { every: string };
      actor: string;
    }
  | { command: 'schedule-rebind'; action: 'list'; consumerId: string | undefined; json: boolean }
  | { command: 'schedule-rebind'; action: 'delete'; scheduleId: string }
  | ({ command: 'pause'; consumerId: string } & AuditArgs)
  | ({ command: 'resume'; consumerId: string } & AuditArgs)
  | {
      command: 'list';
      consumerId: string | undefined;
      phase: (typeof LIST_PHASES)[number] | undefined;
      json: boolean;
    }
  | { command: 'sim'; args: string[] }
  | {
      command: 'backfill';
      consumerId: string;
      filter: StreamFilter;
      /** The Temporal-free run in this process (scripts); otherwise backfillWorkflow on a worker. */
      direct: boolean;
      maxPages: number | undefined;
      detach: boolean;
      /** The live stream consumer's subscription when it is to take over at the target, else null. */
      thenStream: { subscriptionId: string } | null;
      /** The target position; default: the source's head when the backfill starts. */
      until: number | undefined;
      /** No target: keep paging as the history grows (the workflow only). */
      tail: boolean;
    }
  | { command: 'backfill-status'; consumerId: string; json: boolean }
  | {
      command: 'alerts';
      action: 'list';
      consumerId: string | undefined;
      state: AlertState | undefined;
      limit: number;
      json: boolean;
    }
  | ({ command: 'alerts'; action: 'retry' | 'drop'; selection: AlertSelection } & AuditArgs)
  | {
      command: 'run';
      consumerId: string;
      subscriptionId: string;
      filter: StreamFilter;
      dataDir: string;
      intervalMs: number;
      appendEveryMs: number;
    };

export type CommandName = Exclude<CliCommand['command'], 'help'>;

interface CommandSpec {
  summary: string;
  usage: string;
  options: [flag: string, description: string][];
}

const FILTER_OPTIONS: [string, string][] = [
  ['--filter JSON', 'the whole filter as JSON, e.g. \'{"kinds":["trade"],"minNotional":"10000"}\''],
  ['--kinds a,b', 'event kinds (instead of --filter)'],
  ['--markets a,b', 'market ids (instead of --filter)'],
  ['--wallets a,b', 'wallet addresses (instead of --filter)'],
  ['--min-notional DEC', 'minimum notional in USD, a decimal string (instead of --filter)'],
];
const ACTOR_DEFAULT = 'default: the OS user running the command';
const AUDIT_OPTIONS: [string, string][] = [
  ['--actor NAME', `who decides (recorded with the decision; ${ACTOR_DEFAULT})`],
  ['--reason TEXT', 'why (recorded with the decision; required)'],
];

export const COMMANDS: Record<CommandName, CommandSpec> = {
  run: {
    summary: 'the main job: local services, the reference stream, a worker and one consumer, with live progress',
    usage:
      'run [--consumer ID] [--subscription ID] [filter options] [--data-dir DIR] [--interval-ms N] [--append-every-ms N]',
    options: [
      ['--consumer ID', 'consumer to run (default "main")'],
      ['--subscription ID', 'subscription id (default: the consumer id)'],
      ...FILTER_OPTIONS.map(([f, d]): [string, string] => [f, `${d}; used on the first start only`]),
      ['--data-dir DIR', 'where Postgres, Temporal and the reference journal persist (default .data)'],
      ['--interval-ms N', 'progress refresh interval (default 1500)'],
      ['--append-every-ms N', 'how often the reference stream appends a live transition (default 500)'],
    ],
  },
  start: {
    summary: 'start a consumer workflow (explicit first start: live_cut or from_floor)',
    usage: 'start --consumer ID --start live_cut|from_floor [--subscription ID] [filter options] [--lease-ms N]',
    options: [
      ['--consumer ID', 'consumer id (required)'],
      ['--start MODE', 'live_cut (from the head) or from_floor (everything retained); required'],
      ['--subscription ID', 'subscription id (default: the consumer id)'],
      ...FILTER_OPTIONS,
      ['--lease-ms N', "how long one streaming activity runs before it returns (default: the workflow's)"],
    ],
  },
  status: {
    summary: 'phase, position, lag, generation, version, executions, volume, quarantine, last decision',
    usage: 'status --consumer ID [--json]',
    options: [
      ['--consumer ID', 'consumer id (required)'],
      ['--json', 'print one JSON object instead of text'],
    ],
  },
  'resolve-gap': {
    summary: 'decide a reset_required stop: from_floor, live_cut or abandon',
    usage: 'resolve-gap --consumer ID --decision from_floor|live_cut|abandon [--actor NAME] --reason TEXT',
    options: [
      ['--consumer ID', 'consumer id (required)'],
      ['--decision D', GAP_DECISIONS.join(' | ')],
      ...AUDIT_OPTIONS,
    ],
  },
  'resolve-binding': {
    summary: 'decide a cursor_mismatch stop: retry, from_floor, live_cut or abandon',
    usage: 'resolve-binding --consumer ID --decision retry|from_floor|live_cut|abandon [--actor NAME] --reason TEXT',
    options: [
      ['--consumer ID', 'consumer id (required)'],
      ['--decision D', BINDING_DECISIONS.join(' | ')],
      ...AUDIT_OPTIONS,
    ],
  },
  'resolve-quarantine': {
    summary: 'decide held quarantine: release_terminal or retry (all held events, or the named ones)',
    usage:
      'resolve-quarantine --consumer ID --decision release_terminal|retry [--event ID ...] [--actor NAME] --reason TEXT',
    options: [
      ['--consumer ID', 'consumer id (required)'],
      ['--decision D', QUARANTINE_DECISIONS.join(' | ')],
      ['--event ID', 'a held event id; repeat for several (default: all held events)'],
      ...AUDIT_OPTIONS,
    ],
  },
  rebind: {
    summary: 'switch a consumer to a new filter (generation + 1), resuming from its committed token',
    usage: 'rebind --consumer ID (--filter JSON | filter options) [--actor NAME]',
    options: [
      ['--consumer ID', 'consumer id (required)'],
      ...FILTER_OPTIONS,
      ['--actor NAME', `who asks for the rebind (${ACTOR_DEFAULT})`],
    ],
  },
  'schedule-rebind': {
    summary: 'manage Temporal Schedules that rebind a consumer to a filter on a cron or interval',
    usage:
      'schedule-rebind create --consumer ID (--filter JSON | filter options) (--cron EXPR | --every DURATION) [--actor NAME] [--schedule-id ID]\n' +
      '       schedule-rebind list [--consumer ID] [--json]\n' +
      '       schedule-rebind delete (--schedule-id ID | --consumer ID)',
    options: [
      ['--consumer ID', 'consumer id'],
      ...FILTER_OPTIONS,
      ['--cron EXPR', '5-field cron expression, UTC'],
      ['--every DURATION', 'interval such as 30m, 6h, 1d'],
      ['--actor NAME', `recorded as the rebind's requester (${ACTOR_DEFAULT})`],
      ['--schedule-id ID', 'schedule id (default whalehunt-rebind:<consumer>)'],
      ['--json', 'list as JSON'],
    ],
  },
  pause: {
    summary: 'pause a consumer after its current checkpoint',
    usage: 'pause --consumer ID [--actor NAME] --reason TEXT',
    options: [['--consumer ID', 'consumer id (required)'], ...AUDIT_OPTIONS],
  },
  resume: {
    summary: 'resume a paused consumer',
    usage: 'resume --consumer ID [--actor NAME] --reason TEXT',
    options: [['--consumer ID', 'consumer id (required)'], ...AUDIT_OPTIONS],
  },
  list: {
    summary: 'list consumer and backfill workflows (visibility: WhalehuntConsumerId, WhalehuntPhase, WhalehuntKind)',
    usage: 'list [--consumer ID] [--phase PHASE] [--json]',
    options: [
      ['--consumer ID', 'only this consumer'],
      ['--phase PHASE', LIST_PHASES.join(' | ')],
      ['--json', 'print JSON lines'],
    ],
  },
  backfill: {
    summary: 'page a consumer through the history source into the database: backfillWorkflow on a worker (or --direct)',
    usage:
      'backfill --consumer ID (--filter JSON | filter options) [--until POSITION] [--detach] [--then-stream [--subscription ID]] | --tail [--detach] | --direct [--until POSITION] [--max-pages N]',
    options: [
      ['--consumer ID', 'page consumer id (required; its progress is saved, a second run resumes from it)'],
      ...FILTER_OPTIONS.map(([f, d]): [string, string] => [f, `${d}; a consumer stays bound to its first filter`]),
      ['--detach', 'start (or find) the workflow and return at once; default: wait, showing progress'],
      [
        '--until POSITION',
        "the target: complete once the applied position reaches it (default: the source's head when it starts)",
      ],
      ['--then-stream', 'at the target, hand the consumer over to the live stream consumer (same id and filter)'],
      [
        '--tail',
        'no target: keep paging as the history grows, waiting at the head (not with --until, --then-stream, --direct)',
      ],
      ['--subscription ID', "the live consumer's subscription id with --then-stream (default: the consumer id)"],
      ['--direct', 'run in this process against the source and the database, no Temporal (scripts)'],
      ['--max-pages N', 'with --direct: stop after N pages (exit 0; run again to continue)'],
    ],
  },
  'backfill-status': {
    summary: "a page consumer's saved progress: applied position, version, resume cursor (database only)",
    usage: 'backfill-status --consumer ID [--json]',
    options: [
      ['--consumer ID', 'page consumer id (required)'],
      ['--json', 'print one JSON object instead of text'],
    ],
  },
  alerts: {
    summary:
      'whale alerts in the outbox: list them, retry dead or suppressed ones, drop pending or dead ones (database only)',
    usage:
      'alerts list [--consumer ID] [--state pending|dead|sent|suppressed|dropped] [--limit N] [--json]\n' +
      '       alerts retry (--id N [--id N ...] | --all-dead [--consumer ID]) [--actor NAME] --reason TEXT\n' +
      '       alerts drop (--id N [--id N ...] | --all-dead [--consumer ID]) [--actor NAME] --reason TEXT',
    options: [
      ['--consumer ID', "list: only this consumer's alerts; with --all-dead: only its dead ones"],
      ['--state S', 'pending (waiting or being sent) | dead | sent | suppressed | dropped'],
      ['--limit N', `list at most N alerts, newest first (default ${DEFAULT_ALERTS_LIMIT})`],
      ['--json', 'list as JSON lines'],
      [
        '--id N',
        'an alert id from `alerts list`; repeat for several. retry: dead or suppressed; drop: pending or dead',
      ],
      ['--all-dead', 'every dead alert (of --consumer, else of every consumer)'],
      ['--actor NAME', `who decides (recorded in an alert decision; ${ACTOR_DEFAULT})`],
      ['--reason TEXT', 'why (recorded in an alert decision; required)'],
    ],
  },
  sim: {
    summary:
      'run the reference stream server alone (its flags: simulator/README.md, e.g. sim --port 8787 --live-rate 2)',
    usage: 'sim [simulator options]',
    options: [],
  },
};

export function commandHelp(name: CommandName): string {
  const spec = COMMANDS[name];
  const width = Math.max(0, ...spec.options.map(([flag]) => flag.length));
  const lines = [`whalehunt-consumer ${name}: ${spec.summary}`, '', `usage: whalehunt-consumer ${spec.usage}`];
  if (spec.options.length > 0) {
    lines.push('', 'options:', ...spec.options.map(([flag, text]) => `  ${flag.padEnd(width)}  ${text}`));
  }
  return lines.join('\n');
}

export function generalHelp(): string {
  const names = Object.keys(COMMANDS) as CommandName[];
  const width = Math.max(...names.map((n) => n.length));
  return [
    'usage: whalehunt-consumer <command> [options]     (npm run cli -- <command>; npm start = run)',
    '',
    'commands:',
    ...names.map((n) => `  ${n.padEnd(width)}  ${COMMANDS[n].summary}`),
    '',
    'Every command takes --help. Connection settings come from the environment:',
    '  TEMPORAL_ADDRESS (default 127.0.0.1:7233), TEMPORAL_NAMESPACE (default "default"), TASK_QUEUE, DATABASE_URL (status).',
    '  backfill-status and alerts read the database only: DATABASE_URL.',
    "  backfill --direct reads the worker's: DATABASE_URL, WHALEHUNT_URL, WHALEHUNT_API_KEY, PAGE_STREAM, PAGE_LIMIT,",
    '  PAGE_CHUNK_SIZE; backfill without it needs Temporal and a worker (which reads them).',
  ].join('\n');
}

function isCommandName(value: string): value is CommandName {
  return Object.hasOwn(COMMANDS, value);
}

type OptionSpec = { type: 'string' | 'boolean'; multiple?: boolean };
type Values = Record<string, string | boolean | string[] | undefined>;

const FILTER_FLAGS: Record<string, OptionSpec> = {
  filter: { type: 'string' },
  kinds: { type: 'string' },
  markets: { type: 'string' },
  wallets: { type: 'string' },
  'min-notional': { type: 'string' },
};
const AUDIT_FLAGS: Record<string, OptionSpec> = { actor: { type: 'string' }, reason: { type: 'string' } };

/** What a command takes when an option is not given. */
export interface ParseDefaults {
  /** The actor of an audited command without --actor (cli/config.ts defaultActor); without one --actor is required. */
  actor?: string | null;
}

/** Parses argv (without node and script) into a command; throws CliUsageError. */
export function parseCommand(argv: readonly string[], defaults: ParseDefaults = {}): CliCommand {
  const actorOf = (command: CommandName, v: Values): string => actor(command, v, defaults);
  const [first, ...rest] = argv;
  if (first === undefined || first === '--help' || first === '-h' || first === 'help') {
    const topic = first === 'help' ? rest[0] : undefined;
    if (topic !== undefined && !isCommandName(topic)) throw new CliUsageError(`unknown command "${topic}"`);
    return { command: 'help', topic: topic ?? null };
  }
  if (!isCommandName(first)) {
    throw new CliUsageError(`unknown command "${first}"; commands: ${Object.keys(COMMANDS).join(', ')}`);
  }
  // The simulator has its own options; pass everything through untouched.
  if (first === 'sim') return { command: 'sim', args: rest };
  if (rest.includes('--help') || rest.includes('-h')) return { command: 'help', topic: first };

  switch (first) {
    case 'run': {
      const v = parse(first, rest, {
        consumer: { type: 'string' },
        subscription: { type: 'string' },
        ...FILTER_FLAGS,
        'data-dir': { type: 'string' },
        'interval-ms': { type: 'string' },
        'append-every-ms': { type: 'string' },
      });
      const consumerId = v.consumer === undefined ? 'main' : field(first, 'consumer', idSchema, v.consumer);
      return {
        command: 'run',
        consumerId,
        subscriptionId:
          v.subscription === undefined ? consumerId : field(first, 'subscription', idSchema, v.subscription),
        filter: filterFrom(first, v, { required: false }),
        dataDir: typeof v['data-dir'] === 'string' && v['data-dir'] !== '' ? v['data-dir'] : '.data',
        intervalMs: optionalInt(first, 'interval-ms', v['interval-ms'], 100) ?? 1500,
        appendEveryMs: optionalInt(first, 'append-every-ms', v['append-every-ms'], 1) ?? 500,
      };
    }
    case 'start': {
      const v = parse(first, rest, {
        consumer: { type: 'string' },
        subscription: { type: 'string' },
        start: { type: 'string' },
        'lease-ms': { type: 'string' },
        ...FILTER_FLAGS,
      });
      const consumerId = requiredId(first, 'consumer', v);
      return {
        command: 'start',
        consumerId,
        subscriptionId:
          v.subscription === undefined ? consumerId : field(first, 'subscription', idSchema, v.subscription),
        filter: filterFrom(first, v, { required: false }),
        start: choice(first, 'start', INITIAL_STARTS, v.start),
        leaseMs: optionalInt(first, 'lease-ms', v['lease-ms'], 1000),
      };
    }
    case 'status': {
      const v = parse(first, rest, { consumer: { type: 'string' }, json: { type: 'boolean' } });
      return { command: 'status', consumerId: requiredId(first, 'consumer', v), json: v.json === true };
    }
    case 'resolve-gap':
    case 'resolve-binding':
    case 'pause':
    case 'resume': {
      const hasDecision = first === 'resolve-gap' || first === 'resolve-binding';
      const v = parse(first, rest, {
        consumer: { type: 'string' },
        ...(hasDecision ? { decision: { type: 'string' } } : {}),
        ...AUDIT_FLAGS,
      });
      const base = { consumerId: requiredId(first, 'consumer', v), ...audit(first, v, actorOf) };
      if (first === 'resolve-gap')
        return { command: first, ...base, decision: choice(first, 'decision', GAP_DECISIONS, v.decision) };
      if (first === 'resolve-binding')
        return { command: first, ...base, decision: choice(first, 'decision', BINDING_DECISIONS, v.decision) };
      return { command: first, ...base };
    }
    case 'resolve-quarantine': {
      const v = parse(first, rest, {
        consumer: { type: 'string' },
        decision: { type: 'string' },
        event: { type: 'string', multiple: true },
        ...AUDIT_FLAGS,
      });
      const events = v.event as string[] | undefined;
      if (events?.some((e) => e.trim() === '')) throw new CliUsageError(`${first}: --event must not be empty`, first);
      return {
        command: first,
        consumerId: requiredId(first, 'consumer', v),
        decision: choice(first, 'decision', QUARANTINE_DECISIONS, v.decision),
        eventIds: events && events.length > 0 ? events : undefined,
        ...audit(first, v, actorOf),
      };
    }
    case 'rebind': {
      const v = parse(first, rest, { consumer: { type: 'string' }, actor: { type: 'string' }, ...FILTER_FLAGS });
      return {
        command: first,
        consumerId: requiredId(first, 'consumer', v),
        filter: filterFrom(first, v, { required: true }),
        actor: actorOf(first, v),
      };
    }
    case 'schedule-rebind':
      return parseScheduleRebind(rest, actorOf);
    case 'alerts':
      return parseAlerts(rest, actorOf);
    case 'backfill': {
      const v = parse(first, rest, {
        consumer: { type: 'string' },
        direct: { type: 'boolean' },
        'max-pages': { type: 'string' },
        detach: { type: 'boolean' },
        'then-stream': { type: 'boolean' },
        subscription: { type: 'string' },
        until: { type: 'string' },
        tail: { type: 'boolean' },
        ...FILTER_FLAGS,
      });
      const consumerId = requiredId(first, 'consumer', v);
      const direct = v.direct === true;
      const thenStream = v['then-stream'] === true;
      const tail = v.tail === true;
      if (direct && (v.detach === true || thenStream || tail))
        throw new CliUsageError(`${first}: --detach, --then-stream and --tail need the workflow; drop --direct`, first);
      if (tail && (thenStream || v.until !== undefined))
        throw new CliUsageError(
          `${first}: --tail has no target, so it never completes and never hands over: drop --until and --then-stream`,
          first,
        );
      if (!direct && v['max-pages'] !== undefined)
        throw new CliUsageError(`${first}: --max-pages is for --direct runs`, first);
      if (!thenStream && v.subscription !== undefined)
        throw new CliUsageError(`${first}: --subscription is for --then-stream`, first);
      return {
        command: first,
        consumerId,
        filter: filterFrom(first, v, { required: true }),
        direct,
        maxPages: optionalInt(first, 'max-pages', v['max-pages'], 1),
        detach: v.detach === true,
        until: optionalInt(first, 'until', v.until, 1),
        tail,
        thenStream: thenStream
          ? {
              subscriptionId:
                v.subscription === undefined ? consumerId : field(first, 'subscription', idSchema, v.subscription),
            }
          : null,
      };
    }
    case 'backfill-status': {
      const v = parse(first, rest, { consumer: { type: 'string' }, json: { type: 'boolean' } });
      return { command: first, consumerId: requiredId(first, 'consumer', v), json: v.json === true };
    }
    case 'list': {
      const v = parse(first, rest, {
        consumer: { type: 'string' },
        phase: { type: 'string' },
        json: { type: 'boolean' },
      });
      return {
        command: first,
        consumerId: v.consumer === undefined ? undefined : field(first, 'consumer', idSchema, v.consumer),
        phase: v.phase === undefined ? undefined : choice(first, 'phase', LIST_PHASES, v.phase),
        json: v.json === true,
      };
    }
  }
}

export function defaultScheduleId(consumerId: string): string {
  return `whalehunt-rebind:${consumerId}`;
}

type ActorOf = (command: CommandName, v: Values) => string;

function parseScheduleRebind(argv: readonly string[], actorOf: ActorOf): CliCommand {
  const name = 'schedule-rebind';
  const [action, ...rest] = argv;
  switch (action) {
    case 'create': {
      const v = parse(name, rest, {
        consumer: { type: 'string' },
        'schedule-id': { type: 'string' },
        cron: { type: 'string' },
        every: { type: 'string' },
        actor: { type: 'string' },
        ...FILTER_FLAGS,
      });
      const consumerId = requiredId(name, 'consumer', v);
      if ((v.cron === undefined) === (v.every === undefined)) {
        throw new CliUsageError(`${name} create: give exactly one of --cron or --every`, name);
      }
      return {
        command: name,
        action,
        consumerId,
        scheduleId:
          v['schedule-id'] === undefined
            ? defaultScheduleId(consumerId)
            : field(name, 'schedule-id', idSchema, v['schedule-id']),
        filter: filterFrom(name, v, { required: true }),
        timing:
          v.cron !== undefined
            ? { cron: field(name, 'cron', cronSchema, v.cron) }
            : { every: field(name, 'every', durationSchema, v.every) },
        actor: actorOf(name, v),
      };
    }
    case 'list': {
      const v = parse(name, rest, { consumer: { type: 'string' }, json: { type: 'boolean' } });
      return {
        command: name,
        action,
        consumerId: v.consumer === undefined ? undefined : field(name, 'consumer', idSchema, v.consumer),
        json: v.json === true,
      };
    }
    case 'delete': {
      const v = parse(name, rest, { consumer: { type: 'string' }, 'schedule-id': { type: 'string' } });
      if ((v.consumer === undefined) === (v['schedule-id'] === undefined)) {
        throw new CliUsageError(`${name} delete: give exactly one of --schedule-id or --consumer`, name);
      }
      const scheduleId =
        v['schedule-id'] !== undefined
          ? field(name, 'schedule-id', idSchema, v['schedule-id'])
          : defaultScheduleId(field(name, 'consumer', idSchema, v.consumer));
      return { command: name, action, scheduleId };
    }
    default:
      throw new CliUsageError(
        action === undefined
          ? `${name}: missing action (create, list or delete)`
          : `${name}: unknown action "${action}" (create, list or delete)`,
        name,
      );
  }
}

/** Outbox row ids as `alerts list` shows them. */
const alertIdSchema = z
  .string()
  .regex(/^\d+$/, 'must be an alert id (a positive integer, as `alerts list` shows it)')
  .transform(Number)
  .pipe(z.number().min(1, 'must be at least 1').max(Number.MAX_SAFE_INTEGER, 'is too large'));

function parseAlerts(argv: readonly string[], actorOf: ActorOf): CliCommand {
  const name = 'alerts';
  const [action, ...rest] = argv;
  switch (action) {
    case 'list': {
      const v = parse(name, rest, {
        consumer: { type: 'string' },
        state: { type: 'string' },
        limit: { type: 'string' },
        json: { type: 'boolean' },
      });
      return {
        command: name,
        action,
        consumerId: v.consumer === undefined ? undefined : field(name, 'consumer', idSchema, v.consumer),
        state: v.state === undefined ? undefined : choice(name, 'state', ALERT_STATES, v.state),
        limit: optionalInt(name, 'limit', v.limit, 1) ?? DEFAULT_ALERTS_LIMIT,
        json: v.json === true,
      };
    }
    case 'retry':
    case 'drop': {
      const v = parse(name, rest, {
        id: { type: 'string', multiple: true },
        'all-dead': { type: 'boolean' },
        consumer: { type: 'string' },
        ...AUDIT_FLAGS,
      });
      const ids = v.id as string[] | undefined;
      const allDead = v['all-dead'] === true;
      if (ids === undefined && !allDead)
        throw new CliUsageError(`${name} ${action}: which alerts? give --id N (repeatable) or --all-dead`, name);
      if (ids !== undefined && allDead)
        throw new CliUsageError(`${name} ${action}: give either --id or --all-dead, not both`, name);
      if (ids !== undefined && v.consumer !== undefined)
        throw new CliUsageError(
          `${name} ${action}: --consumer goes with --all-dead (an --id names one alert of any consumer)`,
          name,
        );
      const selection: AlertSelection = ids
        ? { ids: [...new Set(ids.map((id) => field(name, 'id', alertIdSchema, id)))] }
        : {
            allDead: true,
            ...(v.consumer === undefined ? {} : { consumerId: field(name, 'consumer', idSchema, v.consumer) }),
          };
      return { command: name, action, selection, ...audit(name, v, actorOf) };
    }
    default:
      throw new CliUsageError(
        action === undefined
          ? `${name}: missing action (list, retry or drop)`
          : `${name}: unknown action "${action}" (list, retry or drop)`,
        name,
      );
  }
}

function parse(command: CommandName, argv: readonly string[], options: Record<string, OptionSpec>): Values {
  try {
    return parseArgs({ args: withDashValues(argv, options), options, strict: true, allowPositionals: false })
      .values as Values;
  } catch (error) {
    // parseArgs' messages name the option ("Unknown option '--x'", "Option '--consumer <value>' argument missing").
    throw new CliUsageError(`${command}: ${error instanceof Error ? error.message : String(error)}`, command);
  }
}

/**
 * `--lease-ms -5` as `--lease-ms=-5`: parseArgs refuses a value that starts with a dash as ambiguous, which
 * would hide the option's own complaint ("must be at least 1000") behind Node's wording.
 */
function withDashValues(argv: readonly string[], options: Record<string, OptionSpec>): string[] {
  const args: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const next = argv[i + 1];
    const name = arg.startsWith('--') ? arg.slice(2) : null;
    if (name && options[name]?.type === 'string' && next !== undefined && /^-[\d.]/.test(next)) {
      args.push(`${arg}=${next}`);
      i += 1;
    } else {
      args.push(arg);
    }
  }
  return args;
}

function field<T>(command: CommandName, option: string, schema: z.ZodType<T>, value: unknown): T {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  throw new CliUsageError(`${command}: --${option} ${issue ? issue.message : 'is invalid'}`, command);
}

function requiredId(command: CommandName, option: string, v: Values): string {
  const value = v[option];
  if (value === undefined) throw new CliUsageError(`${command}: --${option} is required`, command);
  return field(command, option, idSchema, value);
}

function requiredText(command: CommandName, option: string, value: unknown): string {
  if (value === undefined) throw new CliUsageError(`${command}: --${option} is required`, command);
  return field(command, option, auditText, value);
}

function audit(command: CommandName, v: Values, actorOf: ActorOf): AuditArgs {
  return { actor: actorOf(command, v), reason: requiredText(command, 'reason', v.reason) };
}

/** --actor as given (never empty), else the default actor; required only where there is none. */
function actor(command: CommandName, v: Values, defaults: ParseDefaults): string {
  if (v.actor !== undefined || !defaults.actor) return requiredText(command, 'actor', v.actor);
  return defaults.actor;
}

function choice<const T extends readonly string[]>(
  command: CommandName,
  option: string,
  allowed: T,
  value: unknown,
): T[number] {
  if (value === undefined)
    throw new CliUsageError(`${command}: --${option} is required (one of ${allowed.join(', ')})`, command);
  if (typeof value !== 'string' || !allowed.includes(value)) {
    throw new CliUsageError(
      `${command}: invalid --${option} ${JSON.stringify(value)}; expected one of ${allowed.join(', ')}`,
      command,
    );
  }
  return value;
}

function optionalInt(command: CommandName, option: string, value: unknown, min: number): number | undefined {
  if (value === undefined) return undefined;
  const schema = z
    .string()
    .regex(/^-?\d+$/, 'must be an integer')
    .transform(Number)
    .pipe(z.number().min(min, `must be at least ${min}`).max(Number.MAX_SAFE_INTEGER, 'is too large'));
  return field(command, option, schema, value);
}

const FILTER_LIST_FLAGS = ['kinds', 'markets', 'wallets'] as const;

/** `--filter JSON` or the per-field flags (not both), validated against the wire filter schema. */
function filterFrom(command: CommandName, v: Values, opts: { required: boolean }): StreamFilter {
  const fieldFlags = [...FILTER_LIST_FLAGS, 'min-notional'].filter((f) => v[f] !== undefined);
  let candidate: unknown;
  if (v.filter !== undefined) {
    if (fieldFlags.length > 0) {
      throw new CliUsageError(
        `${command}: give either --filter or ${fieldFlags.map((f) => `--${f}`).join('/')}, not both`,
        command,
      );
    }
    try {
      candidate = JSON.parse(v.filter as string);
    } catch {
      throw new CliUsageError(`${command}: --filter is not valid JSON`, command);
    }
  } else if (fieldFlags.length > 0) {
    const built: Record<string, unknown> = {};
    for (const flag of FILTER_LIST_FLAGS) {
      const raw = v[flag];
      if (typeof raw === 'string')
        built[flag] = raw
          .split(',')
          .map((s) => s.trim())
          .filter((s) => s !== '');
    }
    if (typeof v['min-notional'] === 'string') built.minNotional = v['min-notional'];
    candidate = built;
  } else if (opts.required) {
    throw new CliUsageError(
      `${command}: a filter is required (--filter JSON, or --kinds/--markets/--wallets/--min-notional)`,
      command,
    );
  } else {
    candidate = {};
  }
  const result = filterSchema.safeParse(candidate);
  if (!result.success) {
    const issue = result.error.issues[0];
    const where = issue && issue.path.length > 0 ? ` at ${issue.path.join('.')}` : '';
    throw new CliUsageError(`${command}: invalid filter${where}: ${issue ? issue.message : 'rejected'}`, command);
  }
  return result.data;
}
