import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { CliUsageError, commandHelp, COMMANDS, generalHelp, parseCommand, type CommandName } from '../../cli/args.js';
import { defaultActor } from '../../cli/config.js';
import { resumeCommand } from '../../workflows/commands.js';

function usageError(argv: string[], ...rest: [] | [Parameters<typeof parseCommand>[1]]): CliUsageError {
  try {
    parseCommand(argv, ...rest);
  } catch (error) {
    if (error instanceof CliUsageError) return error;
    throw error;
  }
  throw new Error(`expected a usage error for ${argv.join(' ')}`);
}

describe('parseCommand', () => {
  it('parses start with per-field filter flags into the wire filter', () => {
    expect(
      parseCommand([
        'start',
        '--consumer',
        'c1',
        '--start',
        'from_floor',
        '--kinds',
        'trade, correction',
        '--min-notional',
        '10000',
      ]),
    ).toEqual({
      command: 'start',
      consumerId: 'c1',
      subscriptionId: 'c1',
      filter: { kinds: ['trade', 'correction'], minNotional: '10000' },
      start: 'from_floor',
      leaseMs: undefined,
    });
  });

  it('parses start with a JSON filter, a subscription and a lease', () => {
    const parsed = parseCommand([
      'start',
      '--consumer',
      'c1',
      '--subscription',
      's9',
      '--start',
      'live_cut',
      '--filter',
      '{"markets":["m1"]}',
      '--lease-ms',
      '5000',
    ]);
    expect(parsed).toMatchObject({
      subscriptionId: 's9',
      filter: { markets: ['m1'] },
      start: 'live_cut',
      leaseMs: 5000,
    });
  });

  it('requires an explicit first start mode', () => {
    const error = usageError(['start', '--consumer', 'c1']);
    expect(error.message).toContain('--start is required');
    expect(error.code).toBe('usage');
    expect(usageError(['start', '--consumer', 'c1', '--start', 'resume']).message).toContain(
      'invalid --start "resume"',
    );
  });

  it('a negative or otherwise bad number is a usage error naming the option, never an "ambiguous" argument', () => {
    const start = ['start', '--consumer', 'c1', '--start', 'live_cut', '--kinds', 'trade'];
    expect(usageError([...start, '--lease-ms', '-5'])).toMatchObject({
      message: 'start: --lease-ms must be at least 1000',
      command: 'start',
    });
    expect(usageError([...start, '--lease-ms=-5']).message).toBe('start: --lease-ms must be at least 1000');
    for (const bad of ['abc', '1.5', '', '0x10', '1e4', 'Infinity', '-']) {
      expect(usageError([...start, '--lease-ms', bad]).message).toBe('start: --lease-ms must be an integer');
    }
    expect(usageError([...start, '--lease-ms', '99999999999999999999']).message).toBe('start: --lease-ms is too large');
    expect(usageError(['run', '--interval-ms', '-1']).message).toBe('run: --interval-ms must be at least 100');
    expect(
      usageError(['backfill', '--direct', '--consumer', 'b1', '--filter', '{}', '--max-pages', '-3']).message,
    ).toBe('backfill: --max-pages must be at least 1');
    // A dash-led value of a text option is taken as the value too; a missing value is still refused.
    expect(usageError([...start, '--min-notional', '-5']).message).toMatch(/^start: invalid filter at minNotional/);
    expect(usageError(['start', '--consumer', '--start', 'live_cut']).message).toMatch(/--consumer/);
  });

  it('rejects a filter given both ways, bad JSON and fields the wire filter does not know', () => {
    expect(
      usageError(['start', '--consumer', 'c', '--start', 'live_cut', '--filter', '{}', '--kinds', 'trade']).message,
    ).toContain('not both');
    expect(usageError(['start', '--consumer', 'c', '--start', 'live_cut', '--filter', '{kinds']).message).toContain(
      'not valid JSON',
    );
    expect(
      usageError(['start', '--consumer', 'c', '--start', 'live_cut', '--filter', '{"colour":"red"}']).message,
    ).toContain('invalid filter');
    expect(usageError(['start', '--consumer', 'c', '--start', 'live_cut', '--min-notional', '1e6']).message).toMatch(
      /invalid filter at minNotional/,
    );
  });

  it('accepts each decision only from its own set, naming the allowed ones', () => {
    expect(
      parseCommand([
        'resolve-gap',
        '--consumer',
        'c',
        '--decision',
        'live_cut',
        '--actor',
        'ops',
        '--reason',
        'gap accepted',
      ]),
    ).toEqual({
      command: 'resolve-gap',
      consumerId: 'c',
      decision: 'live_cut',
      actor: 'ops',
      reason: 'gap accepted',
    });
    const error = usageError([
      'resolve-gap',
      '--consumer',
      'c',
      '--decision',
      'retry',
      '--actor',
      'ops',
      '--reason',
      'x',
    ]);
    expect(error.message).toBe(
      'resolve-gap: invalid --decision "retry"; expected one of from_floor, live_cut, abandon',
    );
    expect(
      parseCommand(['resolve-binding', '--consumer', 'c', '--decision', 'retry', '--actor', 'a', '--reason', 'r']),
    ).toMatchObject({ decision: 'retry' });
  });

  it('requires a non-empty actor and reason for every decision', () => {
    expect(usageError(['resolve-gap', '--consumer', 'c', '--decision', 'abandon', '--reason', 'r']).message).toBe(
      'resolve-gap: --actor is required',
    );
    expect(usageError(['pause', '--consumer', 'c', '--actor', 'a']).message).toBe('pause: --reason is required');
    expect(usageError(['resume', '--consumer', 'c', '--actor', ' ', '--reason', 'r']).message).toBe(
      'resume: --actor must not be empty',
    );
  });

  it('takes the OS user as the actor without --actor: the printed commands run where USER is unset', () => {
    const osUser = { actor: 'svc-whalehunt' };
    // Exactly as Current Details prints it, as bash hands it over, with no USER in the environment.
    const printed = execFileSync(
      'env',
      ['-u', 'USER', 'bash', '-c', `f() { printf '%s\\0' "$@"; }; f ${resumeCommand('c1')}`],
      {
        encoding: 'utf8',
      },
    );
    const words = printed.split('\0').slice(0, -1);
    const argv = words.slice(words.indexOf('resume')); // without the command that runs the CLI
    // Pasted unedited, the placeholder is refused; with the reason written in, it runs as the OS user.
    expect(usageError(argv, osUser).message).toBe(
      'resume: --reason is still the placeholder from the shown command: write the reason',
    );
    argv[argv.indexOf('<why>')] = 'feed fixed';
    expect(parseCommand(argv, osUser)).toEqual({
      command: 'resume',
      consumerId: 'c1',
      actor: 'svc-whalehunt',
      reason: 'feed fixed',
    });
    for (const command of [
      ['resolve-gap', '--consumer', 'c', '--decision', 'abandon', '--reason', 'r'],
      ['pause', '--consumer', 'c', '--reason', 'r'],
      ['rebind', '--consumer', 'c', '--kinds', 'trade'],
      ['schedule-rebind', 'create', '--consumer', 'c', '--kinds', 'trade', '--every', '6h'],
      ['alerts', 'drop', '--all-dead', '--reason', 'r'],
    ]) {
      expect(parseCommand(command, osUser)).toMatchObject({ actor: 'svc-whalehunt' });
      // --actor still names someone else, and an empty one is still refused.
      expect(parseCommand([...command, '--actor', 'ops'], osUser)).toMatchObject({ actor: 'ops' });
      expect(() => parseCommand([...command, '--actor', ' '], osUser)).toThrow(/--actor must not be empty/);
    }
  });

  it('the default actor is the account name, else USER or LOGNAME (a uid without an account), else the uid', () => {
    const account =
      (username: string, uid = 1000) =>
      () => ({ username, uid });
    const noAccount = () => {
      throw new Error('ENOENT: no such file or directory, uv_os_get_passwd returned');
    };
    expect(defaultActor({}, account('alice'))).toBe('alice');
    expect(defaultActor({ USER: 'root' }, account('alice'))).toBe('alice');
    expect(defaultActor({ USER: 'bob', LOGNAME: 'carol' }, noAccount)).toBe('bob');
    expect(defaultActor({ USER: '', LOGNAME: 'carol' }, noAccount)).toBe('carol');
    expect(defaultActor({}, account('', 1001))).toBe('uid 1001');
  });

  it('collects repeated --event ids for resolve-quarantine', () => {
    expect(
      parseCommand([
        'resolve-quarantine',
        '--consumer',
        'c',
        '--decision',
        'release_terminal',
        '--event',
        'e1',
        '--event',
        'e2',
        '--actor',
        'a',
        '--reason',
        'r',
      ]),
    ).toMatchObject({ decision: 'release_terminal', eventIds: ['e1', 'e2'] });
    expect(
      parseCommand(['resolve-quarantine', '--consumer', 'c', '--decision', 'retry', '--actor', 'a', '--reason', 'r']),
    ).toMatchObject({ eventIds: undefined });
  });

  it('requires a filter and an actor for rebind', () => {
    expect(parseCommand(['rebind', '--consumer', 'c', '--filter', '{"kinds":["trade"]}', '--actor', 'ops'])).toEqual({
      command: 'rebind',
      consumerId: 'c',
      filter: { kinds: ['trade'] },
      actor: 'ops',
    });
    expect(usageError(['rebind', '--consumer', 'c', '--actor', 'ops']).message).toContain('a filter is required');
  });

  it('parses schedule-rebind actions and insists on exactly one timing', () => {
    expect(
      parseCommand([
        'schedule-rebind',
        'create',
        '--consumer',
        'c',
        '--kinds',
        'trade',
        '--every',
        '6h',
        '--actor',
        'ops',
      ]),
    ).toEqual({
      command: 'schedule-rebind',
      action: 'create',
      consumerId: 'c',
      scheduleId: 'whalehunt-rebind:c',
      filter: { kinds: ['trade'] },
      timing: { every: '6h' },
      actor: 'ops',
    });
    expect(
      parseCommand([
        'schedule-rebind',
        'create',
        '--consumer',
        'c',
        '--filter',
        '{}',
        '--cron',
        '0 * * * *',
        '--actor',
        'o',
      ]),
    ).toMatchObject({
      timing: { cron: '0 * * * *' },
    });
    expect(
      usageError(['schedule-rebind', 'create', '--consumer', 'c', '--filter', '{}', '--actor', 'o']).message,
    ).toContain('exactly one of --cron or --every');
    expect(
      usageError(['schedule-rebind', 'create', '--consumer', 'c', '--filter', '{}', '--every', 'soon', '--actor', 'o'])
        .message,
    ).toContain('--every use a number with a unit');
    expect(parseCommand(['schedule-rebind', 'delete', '--consumer', 'c'])).toEqual({
      command: 'schedule-rebind',
      action: 'delete',
      scheduleId: 'whalehunt-rebind:c',
    });
    expect(usageError(['schedule-rebind', 'rename']).message).toContain('unknown action "rename"');
  });

  it('filters list by consumer and phase', () => {
    expect(parseCommand(['list', '--phase', 'awaiting_gap_decision', '--json'])).toEqual({
      command: 'list',
      consumerId: undefined,
      phase: 'awaiting_gap_decision',
      json: true,
    });
    expect(usageError(['list', '--phase', 'sleeping']).message).toContain('invalid --phase "sleeping"');
  });

  it('rejects unknown commands, unknown options, positionals and unsafe ids', () => {
    expect(usageError(['frobnicate']).message).toMatch(/^unknown command "frobnicate"; commands: run, start/);
    expect(usageError(['status', '--consumer', 'c', '--verbose']).message).toMatch(
      /^status: Unknown option '--verbose'/,
    );
    expect(usageError(['status', 'c']).message).toMatch(/^status: .*positional/i);
    expect(usageError(['status', '--consumer', "c' OR 1=1"]).message).toContain('--consumer use 1-128 characters');
  });

  it('passes sim arguments through untouched and answers --help for every command', () => {
    expect(parseCommand(['sim', '--port', '8080', '--help'])).toEqual({
      command: 'sim',
      args: ['--port', '8080', '--help'],
    });
    expect(parseCommand([])).toEqual({ command: 'help', topic: null });
    for (const name of Object.keys(COMMANDS) as CommandName[]) {
      if (name !== 'sim') expect(parseCommand([name, '--help'])).toEqual({ command: 'help', topic: name });
      expect(commandHelp(name)).toContain(`usage: whalehunt-consumer ${name}`);
    }
    expect(generalHelp()).toContain('resolve-quarantine');
  });

  it('parses maintenance: the actor (default the OS user) and --json', () => {
    expect(parseCommand(['maintenance'], { actor: 'osuser' })).toEqual({
      command: 'maintenance',
      actor: 'osuser',
      json: false,
    });
    expect(parseCommand(['maintenance', '--actor', 'ops', '--json'], { actor: 'osuser' })).toEqual({
      command: 'maintenance',
      actor: 'ops',
      json: true,
    });
    expect(usageError(['maintenance', '--consumer', 'c1']).message).toMatch(
      /^maintenance: Unknown option '--consumer'/,
    );
  });

  it('parses backfill and backfill-status; usage errors name the option', () => {
    expect(
      parseCommand(['backfill', '--consumer', 'b1', '--filter', '{"kinds":["trade"]}', '--direct', '--max-pages', '3']),
    ).toEqual({
      command: 'backfill',
      consumerId: 'b1',
      filter: { kinds: ['trade'] },
      direct: true,
      maxPages: 3,
      detach: false,
      thenStream: null,
      until: undefined,
      tail: false,
    });
    expect(parseCommand(['backfill', '--consumer', 'b1', '--filter', '{}'])).toMatchObject({
      filter: {},
      direct: false,
      maxPages: undefined,
      detach: false,
      thenStream: null,
    });
    expect(parseCommand(['backfill', '--consumer', 'b1', '--kinds', 'trade', '--detach', '--then-stream'])).toEqual({
      command: 'backfill',
      consumerId: 'b1',
      filter: { kinds: ['trade'] },
      direct: false,
      maxPages: undefined,
      detach: true,
      thenStream: { subscriptionId: 'b1' },
      until: undefined,
      tail: false,
    });
    expect(
      parseCommand(['backfill', '--consumer', 'b1', '--filter', '{}', '--then-stream', '--subscription', 's9']),
    ).toMatchObject({ thenStream: { subscriptionId: 's9' } });
    expect(usageError(['backfill', '--consumer', 'b1', '--filter', '{}', '--max-pages', '2']).message).toBe(
      'backfill: --max-pages is for --direct runs',
    );
    expect(usageError(['backfill', '--consumer', 'b1', '--filter', '{}', '--direct', '--then-stream']).message).toBe(
      'backfill: --detach, --then-stream and --tail need the workflow; drop --direct',
    );
    // The target: --until POSITION (the workflow or --direct), or none with --tail (the workflow, nothing after it).
    expect(
      parseCommand(['backfill', '--consumer', 'b1', '--filter', '{}', '--until', '1750', '--then-stream']),
    ).toMatchObject({ until: 1750, tail: false, thenStream: { subscriptionId: 'b1' } });
    expect(parseCommand(['backfill', '--consumer', 'b1', '--filter', '{}', '--direct', '--until', '9'])).toMatchObject({
      direct: true,
      until: 9,
    });
    expect(parseCommand(['backfill', '--consumer', 'b1', '--filter', '{}', '--tail', '--detach'])).toMatchObject({
      tail: true,
      until: undefined,
      thenStream: null,
    });
    expect(usageError(['backfill', '--consumer', 'b1', '--filter', '{}', '--until', '0']).message).toBe(
      'backfill: --until must be at least 1',
    );
    expect(usageError(['backfill', '--consumer', 'b1', '--filter', '{}', '--tail', '--then-stream']).message).toBe(
      'backfill: --tail has no target, so it never completes and never hands over: drop --until and --then-stream',
    );
    expect(usageError(['backfill', '--consumer', 'b1', '--filter', '{}', '--tail', '--until', '5']).message).toContain(
      '--tail has no target',
    );
    expect(usageError(['backfill', '--consumer', 'b1', '--filter', '{}', '--tail', '--direct']).message).toBe(
      'backfill: --detach, --then-stream and --tail need the workflow; drop --direct',
    );
    expect(usageError(['backfill', '--consumer', 'b1', '--filter', '{}', '--subscription', 's9']).message).toBe(
      'backfill: --subscription is for --then-stream',
    );
    expect(parseCommand(['backfill-status', '--consumer', 'b1', '--json'])).toEqual({
      command: 'backfill-status',
      consumerId: 'b1',
      json: true,
    });

    expect(usageError(['backfill', '--filter', '{}']).message).toBe('backfill: --consumer is required');
    expect(usageError(['backfill', '--consumer', 'b1']).message).toMatch(
      /^backfill: a filter is required \(--filter JSON/,
    );
    expect(usageError(['backfill', '--consumer', 'b1', '--filter', '{kinds']).message).toBe(
      'backfill: --filter is not valid JSON',
    );
    expect(usageError(['backfill', '--consumer', 'b1', '--filter', '{"kinds":"trade"}']).message).toMatch(
      /^backfill: invalid filter at kinds: /,
    );
    expect(usageError(['backfill', '--consumer', 'b1', '--filter', '{}', '--direct', '--max-pages', '0']).message).toBe(
      'backfill: --max-pages must be at least 1',
    );
    expect(
      usageError(['backfill', '--consumer', 'b1', '--filter', '{}', '--direct', '--max-pages', '2.5']).message,
    ).toBe('backfill: --max-pages must be an integer');
    expect(usageError(['backfill', '--consumer', 'b1', '--filter', '{}', '--kinds', 'trade']).message).toContain(
      'give either --filter or --kinds, not both',
    );
    const error = usageError(['backfill-status']);
    expect(error).toMatchObject({ message: 'backfill-status: --consumer is required', command: 'backfill-status' });
  });

  it('defaults the main job to consumer "main" in .data', () => {
    expect(parseCommand(['run'])).toEqual({
      command: 'run',
      consumerId: 'main',
      subscriptionId: 'main',
      filter: {},
      dataDir: '.data',
      intervalMs: 1500,
      appendEveryMs: 500,
    });
  });
});
