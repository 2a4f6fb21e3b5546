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
import { BACKFILL_PHASES, CONSUMER_PHASES, INITIAL_STARTS, type InitialStart } from '../workflows/definitions.js';

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

/** What `list --phase` accepts: a stream consumer's phases and a backfill's. */
const LIST_PHASES = [...new Set([...CONSUMER_PHASES, ...BACKFILL_PHASES])];

/** What `alerts list --state` accepts: `sent` is the outbox status `done`; `pending` includes alerts being sent. */
export const ALERT_STATES = ['pending', 'dead', 'sent', 'suppressed', 'dropped'] as const;
export type AlertState = (typeof ALERT_STATES)[number];
export const DEFAULT_ALERTS_LIMIT = 50;
/** Which alerts a retry or drop covers: named outbox row ids, or every dead one (of one consumer, or all). */
export type AlertSelection = { ids: number[] } | { allDead: true; consumerId?: string };

// Ids end up in workflow ids and visibility queries; a conservative alphabet keeps both unambiguous.
const ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/;
const idSchema = z.string().regex(ID_PATTERN, 'use 1-128 characters: letters, digits, ".", "_", ":", "-"');
// Current Details shows each decision's command with `--reason "<why>"`: pasted unedited, it is refused.
const auditText = z
  .string()
  .trim()
  .min(1, 'must not be empty')
  .refine((text) => !/^<[^<>]*>$/.test(text), 'is still the placeholder from the shown command: write the reason');
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
      start: InitialStart;
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
  | { command: 'maintenance'; actor: string; json: boolean }
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

/** One option of a command: its line in the command's help, and how the parser reads it. */
interface Flag {
  /** The option without its dashes. */
  name: string;
  /** The value's placeholder in help (`--consumer ID`); an option without one is a switch. */
  arg?: string;
  help: string;
  /** Given once per value (`--event ID --event ID`). */
  multiple?: true;
  /** Of a command with actions: the actions that take it (default: every action). */
  actions?: readonly string[];
}

type Values = Record<string, string | boolean | string[] | undefined>;
/** --actor as given (never empty), else the default actor. */
type ActorOf = (v: Values) => string;
type Reader = (v: Values, actorOf: ActorOf) => CliCommand;

interface CommandHelp {
  summary: string;
  usage: string;
  flags: readonly Flag[];
}
/** A command's help and its reader: the flags are spelled once, for both. */
type CommandSpec = CommandHelp &
  (
    | { read: Reader }
    /** A command with actions (`alerts list`) reads each action's flags its own way. */
    | { actions: Record<string, Reader> }
  );

/** The filter, whole as JSON or field by field; `note` says how the command uses it. */
function filterFlags(note?: string, actions?: readonly string[]): Flag[] {
  const flags: Flag[] = [
    {
      name: 'filter',
      arg: 'JSON',
      help: 'the whole filter as JSON, e.g. \'{"kinds":["trade"],"minNotional":"10000"}\'',
    },
    { name: 'kinds', arg: 'a,b', help: 'event kinds (instead of --filter)' },
    { name: 'markets', arg: 'a,b', help: 'market ids (instead of --filter)' },
    { name: 'wallets', arg: 'a,b', help: 'wallet addresses (instead of --filter)' },
    { name: 'min-notional', arg: 'DEC', help: 'minimum notional in USD, a decimal string (instead of --filter)' },
  ];
  return flags.map((flag) => ({
    ...flag,
    ...(note && { help: `${flag.help}; ${note}` }),
    ...(actions && { actions }),
  }));
}
const ACTOR_DEFAULT = 'default: the OS user running the command';
const AUDIT_FLAGS: Flag[] = [
  { name: 'actor', arg: 'NAME', help: `who decides (recorded with the decision; ${ACTOR_DEFAULT})` },
  { name: 'reason', arg: 'TEXT', help: 'why (recorded with the decision; required)' },
];
const CONSUMER_FLAG: Flag = { name: 'consumer', arg: 'ID', help: 'consumer id (required)' };

export const COMMANDS: { readonly [N in CommandName]: N extends 'sim' ? CommandHelp : CommandSpec } = {
  run: {
    summary: 'the main job: local services, the reference stream, a worker and one consumer, with live progress',
    usage:
      'run [--consumer ID] [--subscription ID] [filter options] [--data-dir DIR] [--interval-ms N] [--append-every-ms N]',
    flags: [
      { name: 'consumer', arg: 'ID', help: 'consumer to run (default "main")' },
      { name: 'subscription', arg: 'ID', help: 'subscription id (default: the consumer id)' },
      ...filterFlags('used on the first start only'),
      {
        name: 'data-dir',
        arg: 'DIR',
        help: 'where Postgres, Temporal and the reference journal persist (default .data)',
      },
      { name: 'interval-ms', arg: 'N', help: 'progress refresh interval (default 1500)' },
      {
        name: 'append-every-ms',
        arg: 'N',
        help: 'how often the reference stream appends a live transition (default 500)',
      },
    ],
    read: (v) => {
      const consumerId = optionalId('run', 'consumer', v) ?? 'main';
      return {
        command: 'run',
        consumerId,
        subscriptionId: optionalId('run', 'subscription', v) ?? consumerId,
        filter: filterFrom('run', v, { required: false }),
        dataDir: typeof v['data-dir'] === 'string' && v['data-dir'] !== '' ? v['data-dir'] : '.data',
        intervalMs: optionalInt('run', 'interval-ms', v['interval-ms'], 100) ?? 1500,
        appendEveryMs: optionalInt('run', 'append-every-ms', v['append-every-ms'], 1) ?? 500,
      };
    },
  },
  start: {
    summary: 'start a consumer workflow (explicit first start: live_cut or from_floor)',
    usage: 'start --consumer ID --start live_cut|from_floor [--subscription ID] [filter options] [--lease-ms N]',
    flags: [
      CONSUMER_FLAG,
      { name: 'start', arg: 'MODE', help: 'live_cut (from the head) or from_floor (everything retained); required' },
      { name: 'subscription', arg: 'ID', help: 'subscription id (default: the consumer id)' },
      ...filterFlags(),
      {
        name: 'lease-ms',
        arg: 'N',
        help: "how long one streaming activity runs before it returns (default: the workflow's)",
      },
    ],
    read: (v) => {
      const consumerId = requiredId('start', 'consumer', v);
      return {
        command: 'start',
        consumerId,
        subscriptionId: optionalId('start', 'subscription', v) ?? consumerId,
        filter: filterFrom('start', v, { required: false }),
        start: choice('start', 'start', INITIAL_STARTS, v.start),
        leaseMs: optionalInt('start', 'lease-ms', v['lease-ms'], 1000),
      };
    },
  },
  status: {
    summary: 'phase, position, lag, generation, version, executions, volume, quarantine, last decision',
    usage: 'status --consumer ID [--json]',
    flags: [CONSUMER_FLAG, { name: 'json', help: 'print one JSON object instead of text' }],
    read: (v) => ({ command: 'status', consumerId: requiredId('status', 'consumer', v), json: v.json === true }),
  },
  'resolve-gap': {
    summary: 'decide a reset_required stop: from_floor, live_cut or abandon',
    usage: 'resolve-gap --consumer ID --decision from_floor|live_cut|abandon [--actor NAME] --reason TEXT',
    flags: [CONSUMER_FLAG, { name: 'decision', arg: 'D', help: GAP_DECISIONS.join(' | ') }, ...AUDIT_FLAGS],
    read: (v, actorOf) => ({
      command: 'resolve-gap',
      ...audited('resolve-gap', v, actorOf),
      decision: choice('resolve-gap', 'decision', GAP_DECISIONS, v.decision),
    }),
  },
  'resolve-binding': {
    summary: 'decide a cursor_mismatch stop: retry, from_floor, live_cut or abandon',
    usage: 'resolve-binding --consumer ID --decision retry|from_floor|live_cut|abandon [--actor NAME] --reason TEXT',
    flags: [CONSUMER_FLAG, { name: 'decision', arg: 'D', help: BINDING_DECISIONS.join(' | ') }, ...AUDIT_FLAGS],
    read: (v, actorOf) => ({
      command: 'resolve-binding',
      ...audited('resolve-binding', v, actorOf),
      decision: choice('resolve-binding', 'decision', BINDING_DECISIONS, v.decision),
    }),
  },
  'resolve-quarantine': {
    summary: 'decide held quarantine: release_terminal or retry (all held events, or the named ones)',
    usage:
      'resolve-quarantine --consumer ID --decision release_terminal|retry [--event ID ...] [--actor NAME] --reason TEXT',
    flags: [
      CONSUMER_FLAG,
      { name: 'decision', arg: 'D', help: QUARANTINE_DECISIONS.join(' | ') },
      {
        name: 'event',
        arg: 'ID',
        help: 'a held event id; repeat for several (default: all held events)',
        multiple: true,
      },
      ...AUDIT_FLAGS,
    ],
    read: readResolveQuarantine,
  },
  rebind: {
    summary: 'switch a consumer to a new filter (generation + 1), resuming from its committed token',
    usage: 'rebind --consumer ID (--filter JSON | filter options) [--actor NAME]',
    flags: [
      CONSUMER_FLAG,
      ...filterFlags(),
      { name: 'actor', arg: 'NAME', help: `who asks for the rebind (${ACTOR_DEFAULT})` },
    ],
    read: (v, actorOf) => ({
      command: 'rebind',
      consumerId: requiredId('rebind', 'consumer', v),
      filter: filterFrom('rebind', v, { required: true }),
      actor: actorOf(v),
    }),
  },
  'schedule-rebind': {
    summary: 'manage Temporal Schedules that rebind a consumer to a filter on a cron or interval',
    usage:
      'schedule-rebind create --consumer ID (--filter JSON | filter options) (--cron EXPR | --every DURATION) [--actor NAME] [--schedule-id ID]\n' +
      '       schedule-rebind list [--consumer ID] [--json]\n' +
      '       schedule-rebind delete (--schedule-id ID | --consumer ID)',
    flags: [
      { name: 'consumer', arg: 'ID', help: 'consumer id' },
      ...filterFlags(undefined, ['create']),
      { name: 'cron', arg: 'EXPR', help: '5-field cron expression, UTC', actions: ['create'] },
      { name: 'every', arg: 'DURATION', help: 'interval such as 30m, 6h, 1d', actions: ['create'] },
      {
        name: 'actor',
        arg: 'NAME',
        help: `recorded as the rebind's requester (${ACTOR_DEFAULT})`,
        actions: ['create'],
      },
      {
        name: 'schedule-id',
        arg: 'ID',
        help: `schedule id (default ${defaultScheduleId('<consumer>')})`,
        actions: ['create', 'delete'],
      },
      { name: 'json', help: 'list as JSON', actions: ['list'] },
    ],
    actions: {
      create: readScheduleCreate,
      list: (v) => ({
        command: 'schedule-rebind',
        action: 'list',
        consumerId: optionalId('schedule-rebind', 'consumer', v),
        json: v.json === true,
      }),
      delete: readScheduleDelete,
    },
  },
  pause: {
    summary: 'pause a consumer after its current checkpoint',
    usage: 'pause --consumer ID [--actor NAME] --reason TEXT',
    flags: [CONSUMER_FLAG, ...AUDIT_FLAGS],
    read: (v, actorOf) => ({ command: 'pause', ...audited('pause', v, actorOf) }),
  },
  resume: {
    summary: 'resume a paused consumer',
    usage: 'resume --consumer ID [--actor NAME] --reason TEXT',
    flags: [CONSUMER_FLAG, ...AUDIT_FLAGS],
    read: (v, actorOf) => ({ command: 'resume', ...audited('resume', v, actorOf) }),
  },
  list: {
    summary: 'list consumer and backfill workflows (visibility: WhalehuntConsumerId, WhalehuntPhase, WhalehuntKind)',
    usage: 'list [--consumer ID] [--phase PHASE] [--json]',
    flags: [
      { name: 'consumer', arg: 'ID', help: 'only this consumer' },
      { name: 'phase', arg: 'PHASE', help: LIST_PHASES.join(' | ') },
      { name: 'json', help: 'print JSON lines' },
    ],
    read: (v) => ({
      command: 'list',
      consumerId: optionalId('list', 'consumer', v),
      phase: v.phase === undefined ? undefined : choice('list', 'phase', LIST_PHASES, v.phase),
      json: v.json === true,
    }),
  },
  maintenance: {
    summary:
      'run maintenance now (maintenanceWorkflow on a worker): remove receipts below retention floors, old alerts and revisions',
    usage: 'maintenance [--actor NAME] [--json]',
    flags: [
      { name: 'actor', arg: 'NAME', help: `who asks (shown in the workflow's Current Details; ${ACTOR_DEFAULT})` },
      { name: 'json', help: 'print the report as one JSON object' },
    ],
    read: (v, actorOf) => ({ command: 'maintenance', actor: actorOf(v), json: v.json === true }),
  },
  backfill: {
    summary: 'page a consumer through the history source into the database: backfillWorkflow on a worker (or --direct)',
    usage:
      'backfill --consumer ID (--filter JSON | filter options) [--until POSITION] [--detach] [--then-stream [--subscription ID]] | --tail [--detach] | --direct [--until POSITION] [--max-pages N]',
    flags: [
      {
        name: 'consumer',
        arg: 'ID',
        help: 'page consumer id (required; its progress is saved, a second run resumes from it)',
      },
      ...filterFlags('a consumer stays bound to its first filter'),
      { name: 'detach', help: 'start (or find) the workflow and return at once; default: wait, showing progress' },
      {
        name: 'until',
        arg: 'POSITION',
        help: "the target: complete once the applied position reaches it (default: the source's head when it starts)",
      },
      {
        name: 'then-stream',
        help: 'at the target, hand the consumer over to the live stream consumer (same id and filter)',
      },
      {
        name: 'tail',
        help: 'no target: keep paging as the history grows, waiting at the head (not with --until, --then-stream, --direct)',
      },
      {
        name: 'subscription',
        arg: 'ID',
        help: "the live consumer's subscription id with --then-stream (default: the consumer id)",
      },
      { name: 'direct', help: 'run in this process against the source and the database, no Temporal (scripts)' },
      { name: 'max-pages', arg: 'N', help: 'with --direct: stop after N pages (exit 0; run again to continue)' },
    ],
    read: readBackfill,
  },
  'backfill-status': {
    summary: "a page consumer's saved progress: applied position, version, resume cursor (database only)",
    usage: 'backfill-status --consumer ID [--json]',
    flags: [
      { name: 'consumer', arg: 'ID', help: 'page consumer id (required)' },
      { name: 'json', help: 'print one JSON object instead of text' },
    ],
    read: (v) => ({
      command: 'backfill-status',
      consumerId: requiredId('backfill-status', 'consumer', v),
      json: v.json === true,
    }),
  },
  alerts: {
    summary:
      'whale alerts in the outbox: list them, retry dead or suppressed ones, drop pending or dead ones (database only)',
    usage:
      'alerts list [--consumer ID] [--state pending|dead|sent|suppressed|dropped] [--limit N] [--json]\n' +
      '       alerts retry (--id N [--id N ...] | --all-dead [--consumer ID]) [--actor NAME] --reason TEXT\n' +
      '       alerts drop (--id N [--id N ...] | --all-dead [--consumer ID]) [--actor NAME] --reason TEXT',
    flags: [
      { name: 'consumer', arg: 'ID', help: "list: only this consumer's alerts; with --all-dead: only its dead ones" },
      {
        name: 'state',
        arg: 'S',
        help: 'pending (waiting or being sent) | dead | sent | suppressed | dropped',
        actions: ['list'],
      },
      {
        name: 'limit',
        arg: 'N',
        help: `list at most N alerts, newest first (default ${DEFAULT_ALERTS_LIMIT})`,
        actions: ['list'],
      },
      { name: 'json', help: 'list as JSON lines', actions: ['list'] },
      {
        name: 'id',
        arg: 'N',
        help: 'an alert id from `alerts list`; repeat for several. retry: dead or suppressed; drop: pending or dead',
        multiple: true,
        actions: ['retry', 'drop'],
      },
      {
        name: 'all-dead',
        help: 'every dead alert (of --consumer, else of every consumer)',
        actions: ['retry', 'drop'],
      },
      {
        name: 'actor',
        arg: 'NAME',
        help: `who decides (recorded in an alert decision; ${ACTOR_DEFAULT})`,
        actions: ['retry', 'drop'],
      },
      {
        name: 'reason',
        arg: 'TEXT',
        help: 'why (recorded in an alert decision; required)',
        actions: ['retry', 'drop'],
      },
    ],
    actions: {
      list: (v) => ({
        command: 'alerts',
        action: 'list',
        consumerId: optionalId('alerts', 'consumer', v),
        state: v.state === undefined ? undefined : choice('alerts', 'state', ALERT_STATES, v.state),
        limit: optionalInt('alerts', 'limit', v.limit, 1) ?? DEFAULT_ALERTS_LIMIT,
        json: v.json === true,
      }),
      retry: (v, actorOf) => readAlertChange('retry', v, actorOf),
      drop: (v, actorOf) => readAlertChange('drop', v, actorOf),
    },
  },
  sim: {
    summary:
      'run the reference stream server alone (its flags: simulator/README.md, e.g. sim --port 8787 --live-rate 2)',
    usage: 'sim [simulator options]',
    flags: [],
  },
};

export function commandHelp(name: CommandName): string {
  const spec = COMMANDS[name];
  const rows = spec.flags.map(({ name: flag, arg, help }) => [arg ? `--${flag} ${arg}` : `--${flag}`, help] as const);
  const width = Math.max(0, ...rows.map(([flag]) => flag.length));
  const lines = [`whalehunt-consumer ${name}: ${spec.summary}`, '', `usage: whalehunt-consumer ${spec.usage}`];
  if (rows.length > 0) {
    lines.push('', 'options:', ...rows.map(([flag, text]) => `  ${flag.padEnd(width)}  ${text}`));
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
    "  maintenance runs on a worker of TASK_QUEUE, with that worker's retention settings.",
    '  backfill-status and alerts read the database only: DATABASE_URL.',
    "  backfill --direct reads the worker's variables (npm run worker -- --help): DATABASE_URL, WHALEHUNT_URL,",
    '  WHALEHUNT_API_KEY, PAGE_* and the rest; backfill without it needs Temporal and a worker (which reads them).',
  ].join('\n');
}

function isCommandName(value: string): value is CommandName {
  return Object.hasOwn(COMMANDS, value);
}

/** What a command takes when an option is not given. */
export interface ParseDefaults {
  /** The actor of an audited command without --actor (cli/config.ts defaultActor); without one --actor is required. */
  actor?: string | null;
}

/** Parses argv (without node and script) into a command; throws CliUsageError. */
export function parseCommand(argv: readonly string[], defaults: ParseDefaults = {}): CliCommand {
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

  const spec = COMMANDS[first];
  const actorOf = (v: Values): string => actor(first, v, defaults);
  if ('read' in spec) return spec.read(parse(first, rest, spec.flags), actorOf);
  const [action, ...flags] = rest;
  if (action === undefined || !Object.hasOwn(spec.actions, action)) {
    const names = Object.keys(spec.actions);
    const expected = `${names.slice(0, -1).join(', ')} or ${names.at(-1)}`;
    throw new CliUsageError(
      action === undefined
        ? `${first}: missing action (${expected})`
        : `${first}: unknown action "${action}" (${expected})`,
      first,
    );
  }
  return spec.actions[action]!(parse(first, flags, spec.flags, action), actorOf);
}

export function defaultScheduleId(consumerId: string): string {
  return `whalehunt-rebind:${consumerId}`;
}

function readResolveQuarantine(v: Values, actorOf: ActorOf): CliCommand {
  const name = 'resolve-quarantine';
  const events = v.event as string[] | undefined;
  if (events?.some((e) => e.trim() === '')) throw new CliUsageError(`${name}: --event must not be empty`, name);
  return {
    command: name,
    consumerId: requiredId(name, 'consumer', v),
    decision: choice(name, 'decision', QUARANTINE_DECISIONS, v.decision),
    eventIds: events && events.length > 0 ? events : undefined,
    ...audit(name, v, actorOf),
  };
}

function readScheduleCreate(v: Values, actorOf: ActorOf): CliCommand {
  const name = 'schedule-rebind';
  const consumerId = requiredId(name, 'consumer', v);
  if ((v.cron === undefined) === (v.every === undefined)) {
    throw new CliUsageError(`${name} create: give exactly one of --cron or --every`, name);
  }
  return {
    command: name,
    action: 'create',
    consumerId,
    scheduleId: optionalId(name, 'schedule-id', v) ?? defaultScheduleId(consumerId),
    filter: filterFrom(name, v, { required: true }),
    timing:
      v.cron !== undefined
        ? { cron: field(name, 'cron', cronSchema, v.cron) }
        : { every: field(name, 'every', durationSchema, v.every) },
    actor: actorOf(v),
  };
}

function readScheduleDelete(v: Values): CliCommand {
  const name = 'schedule-rebind';
  if ((v.consumer === undefined) === (v['schedule-id'] === undefined)) {
    throw new CliUsageError(`${name} delete: give exactly one of --schedule-id or --consumer`, name);
  }
  const scheduleId = optionalId(name, 'schedule-id', v) ?? defaultScheduleId(requiredId(name, 'consumer', v));
  return { command: name, action: 'delete', scheduleId };
}

function readBackfill(v: Values): CliCommand {
  const name = 'backfill';
  const consumerId = requiredId(name, 'consumer', v);
  const direct = v.direct === true;
  const thenStream = v['then-stream'] === true;
  const tail = v.tail === true;
  if (direct && (v.detach === true || thenStream || tail))
    throw new CliUsageError(`${name}: --detach, --then-stream and --tail need the workflow; drop --direct`, name);
  if (tail && (thenStream || v.until !== undefined))
    throw new CliUsageError(
      `${name}: --tail has no target, so it never completes and never hands over: drop --until and --then-stream`,
      name,
    );
  if (!direct && v['max-pages'] !== undefined)
    throw new CliUsageError(`${name}: --max-pages is for --direct runs`, name);
  if (!thenStream && v.subscription !== undefined)
    throw new CliUsageError(`${name}: --subscription is for --then-stream`, name);
  return {
    command: name,
    consumerId,
    filter: filterFrom(name, v, { required: true }),
    direct,
    maxPages: optionalInt(name, 'max-pages', v['max-pages'], 1),
    detach: v.detach === true,
    until: optionalInt(name, 'until', v.until, 1),
    tail,
    thenStream: thenStream ? { subscriptionId: optionalId(name, 'subscription', v) ?? consumerId } : null,
  };
}

/** Outbox row ids as `alerts list` shows them. */
const alertIdSchema = z
  .string()
  .regex(/^\d+$/, 'must be an alert id (a positive integer, as `alerts list` shows it)')
  .transform(Number)
  .pipe(z.number().min(1, 'must be at least 1').max(Number.MAX_SAFE_INTEGER, 'is too large'));

function readAlertChange(action: 'retry' | 'drop', v: Values, actorOf: ActorOf): CliCommand {
  const name = 'alerts';
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
  const consumerId = optionalId(name, 'consumer', v);
  const selection: AlertSelection = ids
    ? { ids: [...new Set(ids.map((id) => field(name, 'id', alertIdSchema, id)))] }
    : { allDead: true, ...(consumerId === undefined ? {} : { consumerId }) };
  return { command: name, action, selection, ...audit(name, v, actorOf) };
}

type OptionSpec = { type: 'string' | 'boolean'; multiple?: boolean };

/** Reads argv against the command's flags (those of `action`, for a command with actions). */
function parse(command: CommandName, argv: readonly string[], flags: readonly Flag[], action?: string): Values {
  const options: Record<string, OptionSpec> = {};
  for (const flag of flags) {
    if (action !== undefined && flag.actions !== undefined && !flag.actions.includes(action)) continue;
    options[flag.name] = { type: flag.arg ? 'string' : 'boolean', ...(flag.multiple && { multiple: true }) };
  }
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

function optionalId(command: CommandName, option: string, v: Values): string | undefined {
  return v[option] === undefined ? undefined : field(command, option, idSchema, v[option]);
}

function audit(command: CommandName, v: Values, actorOf: ActorOf): AuditArgs {
  return { actor: actorOf(v), reason: requiredText(command, 'reason', v.reason) };
}

/** The consumer an audited decision is about, and who decides why. */
function audited(command: CommandName, v: Values, actorOf: ActorOf): { consumerId: string } & AuditArgs {
  return { consumerId: requiredId(command, 'consumer', v), ...audit(command, v, actorOf) };
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
