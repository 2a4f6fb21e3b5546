// The summary of a `npm run bench -- all`: bench/results/summary.md (the headline figures of every result
// present, before vs after) and throughput.svg / throughput.png (throughput by checkpoint size, before vs after).
// The PNG is the SVG rendered by a headless Chromium when one is installed (no npm dependency for a chart).
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AlertsPacedRow, AlertsSustainedRow, AlertsTargets } from './alerts.js';
import type { CpuRow } from './cpu.js';
import type { MemoryRow } from './memory.js';
import type { StreamRow } from './stream.js';
import type { TemporalRow } from './temporal.js';
import { RESULTS, round, table, type MachineState } from './support.js';

interface Series {
  eventsPerSecond: number;
}
interface CommitResult {
  whaleAlertShare: number;
  end: MachineState;
  rows: { size: number; commitCheckpoint: Series; before: Series | null; handWritten: Series }[];
  /** absent in results written before it was measured */
  latency?: { ratioP99: number; ratioP99Before: number | null };
}
interface CommitLeanResult {
  date: string;
  /** absent in results written before it was recorded */
  rows?: { size: number; ratio: number }[];
}
interface TemporalResult {
  end: MachineState;
  eventsPerCheckpoint: number;
  checkpointEvery: number;
  rows: TemporalRow[];
}
interface MemoryResult {
  end: MachineState;
  rows: MemoryRow[];
}
interface StreamResult {
  end: MachineState;
  rows: StreamRow[];
}
interface JournalResult {
  end: MachineState;
  rows: { target: string; transitions: number; live: number; heapAfterLiveMb: number; maxRssMb: number }[];
}
interface ScaleResult {
  end: MachineState;
  rows: { workers: number; consumers: number; totalEventsPerSecond: number; speedup: number }[];
}
interface AlertsResult {
  end: MachineState;
  trees: { after: string; before: string | null };
  targets: AlertsTargets;
  paced: AlertsPacedRow[];
  sustained: AlertsSustainedRow[];
}
interface CpuResult {
  end: MachineState;
  events: number;
  rows: CpuRow[];
}

function read<T>(name: string): T | null {
  const path = join(RESULTS, `${name}.json`);
  return existsSync(path) ? (JSON.parse(readFileSync(path, 'utf8')) as T) : null;
}

/** One panel of grouped bars: a group per x value, a bar per series. */
interface Panel {
  title: string;
  xLabel: string;
  groups: { x: string; values: { label: string; value: number | null }[] }[];
}

const COLOURS: Record<string, string> = { before: '#9aa5b1', after: '#2f6fde', 'hand-written': '#e3a33b' };
const escape = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;');

function panelSvg(panel: Panel, x0: number, width: number, height: number): string {
  const top = 50;
  const bottom = height - 60;
  const left = x0 + 70;
  const right = x0 + width - 20;
  const max = Math.max(1, ...panel.groups.flatMap((g) => g.values.map((v) => v.value ?? 0)));
  const groupWidth = (right - left) / panel.groups.length;
  const parts = [
    `<text x="${x0 + width / 2}" y="28" font-size="16" text-anchor="middle" font-weight="bold">${escape(panel.title)}</text>`,
    `<line x1="${left}" y1="${bottom}" x2="${right}" y2="${bottom}" stroke="#333"/>`,
    `<line x1="${left}" y1="${top}" x2="${left}" y2="${bottom}" stroke="#333"/>`,
    `<text x="${(left + right) / 2}" y="${height - 18}" font-size="13" text-anchor="middle">${escape(panel.xLabel)}</text>`,
  ];
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4;
    const y = bottom - ((bottom - top) * i) / 4;
    parts.push(
      `<line x1="${left}" y1="${y}" x2="${right}" y2="${y}" stroke="#ddd"/>`,
      `<text x="${left - 6}" y="${y + 4}" font-size="11" text-anchor="end">${Math.round(v).toLocaleString('en')}</text>`,
    );
  }
  panel.groups.forEach((group, gi) => {
    const bars = group.values.length;
    const barWidth = (groupWidth * 0.7) / bars;
    const gx = left + gi * groupWidth + groupWidth * 0.15;
    group.values.forEach((v, bi) => {
      if (v.value === null) return;
      const h = ((bottom - top) * v.value) / max;
      const x = gx + bi * barWidth;
      parts.push(
        `<rect x="${x}" y="${bottom - h}" width="${barWidth - 2}" height="${h}" fill="${COLOURS[v.label] ?? '#555'}"/>`,
        `<text x="${x + barWidth / 2}" y="${bottom - h - 4}" font-size="10" text-anchor="middle">${Math.round(v.value).toLocaleString('en')}</text>`,
      );
    });
    parts.push(
      `<text x="${left + (gi + 0.5) * groupWidth}" y="${bottom + 18}" font-size="12" text-anchor="middle">${escape(group.x)}</text>`,
    );
  });
  return parts.join('\n');
}

function chartSvg(panels: Panel[], caption: string): { svg: string; width: number; height: number } {
  const panelWidth = 520;
  const height = 380;
  const width = panelWidth * panels.length;
  const labels = [...new Set(panels.flatMap((p) => p.groups.flatMap((g) => g.values.map((v) => v.label))))];
  const legend = labels
    .map(
      (label, i) =>
        `<rect x="${20 + i * 130}" y="${height + 8}" width="14" height="14" fill="${COLOURS[label] ?? '#555'}"/>` +
        `<text x="${40 + i * 130}" y="${height + 20}" font-size="13">${escape(label)}</text>`,
    )
    .join('\n');
  const total = height + 60;
  const svg = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${total}" font-family="sans-serif">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    ...panels.map((p, i) => panelSvg(p, i * panelWidth, panelWidth, height)),
    legend,
    `<text x="20" y="${height + 45}" font-size="11" fill="#444">${escape(caption)}</text>`,
    '</svg>',
  ].join('\n');
  return { svg, width, height: total };
}

/** Renders the SVG to a PNG with a headless Chromium; false when none is installed or it fails. */
function renderPng(svgPath: string, pngPath: string, width: number, height: number): boolean {
  for (const browser of ['chromium', 'chromium-browser', 'google-chrome']) {
    try {
      rmSync(pngPath, { force: true });
      execFileSync(
        browser,
        [
          '--headless',
          '--no-sandbox',
          '--disable-gpu',
          '--hide-scrollbars',
          `--window-size=${width},${height}`,
          `--screenshot=${pngPath}`,
          `file://${svgPath}`,
        ],
        { stdio: 'ignore', timeout: 60_000 },
      );
      if (existsSync(pngPath)) return true;
    } catch {
      // not installed, or it failed: try the next name
    }
  }
  return false;
}

type Cell = string | number | null | undefined;

/**
 * Issue 12's table: each measure before and after, from the results present (blank where one is missing or
 * predates the measure).
 */
function issue12Table(): string[] {
  const stream = read<StreamResult>('stream');
  const commit = read<CommitResult>('commit');
  const lean = read<CommitLeanResult>('commit-lean');
  const temporal = read<TemporalResult>('temporal');
  const memory = read<MemoryResult>('memory');
  const streamRow = (every: number, target: string) =>
    stream?.rows.find((r) => r.checkpointEvery === every && r.target === target);
  const temporalRow = (target: string) => temporal?.rows.find((r) => r.target === target);
  const memoryRow = (target: string) => memory?.rows.find((r) => r.target === target);
  const cell = (value: Cell, unit = '') => (value === null || value === undefined ? '' : `${value}${unit}`);

  const leanRatios = lean?.rows?.map((r) => `${r.ratio} at ${r.size.toLocaleString('en')}`).join(', ');
  const small = (target: string) => streamRow(10, target)?.eventsPerSecond;
  const smallBefore = small('before');
  const smallAfter = small('after');
  const memoryCell = (target: string) => {
    const row = memoryRow(target);
    if (!row) return '';
    const [first, ...rest] = row.rssAtMib;
    return `${row.peakSampledRssMib} MiB peak; ${first} → ${rest.at(-1)} MiB from 10% to 100%`;
  };
  const temporalMeasure = temporal
    ? `end to end through Temporal, checkpoints of ${temporal.checkpointEvery.toLocaleString('en')} transitions ` +
      `(${temporal.eventsPerCheckpoint.toLocaleString('en')} events)`
    : 'end to end through Temporal, 1,000-event checkpoints';
  const rows: Cell[][] = [
    [
      temporalMeasure,
      cell(temporalRow('before')?.temporalEventsPerSecond, ' ev/s'),
      cell(temporalRow('after')?.temporalEventsPerSecond, ' ev/s'),
      '≥ 50,000 ev/s',
    ],
    ['commitCheckpoint vs the leanest correct transaction', '', cell(leanRatios), '≥ 0.8× at 100 and 1,000'],
    [
      'client CPU per event (consumer process; stream, checkpoints of 1,000 transitions)',
      cell(streamRow(1000, 'before')?.cpuUsPerEvent, ' µs'),
      cell(streamRow(1000, 'after')?.cpuUsPerEvent, ' µs'),
      '≤ 15 µs',
    ],
    [
      'Postgres CPU per event (stream, checkpoints of 1,000 transitions)',
      cell(streamRow(1000, 'before')?.postgresCpuUsPerEvent, ' µs'),
      cell(streamRow(1000, 'after')?.postgresCpuUsPerEvent, ' µs'),
      '≤ 12 µs',
    ],
    [
      'small checkpoints (10 transitions each; stream)',
      cell(smallBefore, ' ev/s'),
      smallAfter === undefined
        ? ''
        : `${smallAfter} ev/s` + (smallBefore ? ` (${round(smallAfter / smallBefore, 2)}× before)` : ''),
      '≥ 5× today',
    ],
    [
      'through Temporal vs in-process (events/s ratio)',
      cell(temporalRow('before')?.ratio),
      cell(temporalRow('after')?.ratio),
      'keep ≥ 0.9',
    ],
    [
      'commit p99 of a 1-event checkpoint vs a bare one-row commit (the ACK is sent when the commit resolves)',
      cell(commit?.latency?.ratioP99Before, '×'),
      cell(commit?.latency?.ratioP99, '×'),
      'keep ≤ 5×',
    ],
    [
      `streaming run RSS over a ${memory ? memory.rows[0]!.events.toLocaleString('en') : '1M'}-event replay ` +
        '(consumeStream in a process of its own)',
      memoryCell('before'),
      memoryCell('after'),
      '≤ 160 MiB (worker), flat',
    ],
  ];
  const sources = [
    ['stream', stream?.end.at],
    ['commit', commit?.end.at],
    ['commit-lean', lean?.date],
    ['temporal', temporal?.end.at],
    ['memory', memory?.end.at],
  ]
    .map(([name, at]) => `${name} ${at ?? 'missing'}`)
    .join(', ');
  return [
    '## issue 12 table',
    '',
    ...table(
      ['measure', 'before', 'after', 'target'],
      rows.map((r) => r.map((c) => c ?? '')),
    ),
    '',
    `From bench/results (${sources}); blank = not measured. commit-lean measures this tree only.`,
    '',
  ];
}

export function writeSummary(): void {
  const cpu = read<CpuResult>('cpu');
  const stream = read<StreamResult>('stream');
  const commit = read<CommitResult>('commit');
  const lines = ['# benchmark summary', '', ...issue12Table()];
  if (cpu) {
    lines.push(
      `## client CPU per event (${cpu.end.at}, load ${cpu.end.loadavg.join(' ')})`,
      '',
      ...table(
        ['tree', 'commit', 'decode µs', 'session+staging µs', 'decide µs', 'total µs/event'],
        cpu.rows.map((r) => [r.target, r.commit, r.decodeUs, r.stageUs, r.decideUs, r.totalUs]),
      ),
      '',
    );
  }
  if (stream) {
    lines.push(
      `## stream, end to end (${stream.end.at}, load ${stream.end.loadavg.join(' ')})`,
      '',
      ...table(
        [
          'checkpointEvery',
          'tree',
          'events/s',
          'client cpu µs/event',
          'postgres cpu µs/event',
          'server cpu µs/event',
          'commit p50 ms',
          'peak RSS MB',
          'live heap MB',
        ],
        stream.rows.map((r) => [
          r.checkpointEvery,
          r.target,
          r.eventsPerSecond,
          r.cpuUsPerEvent,
          // Results written before these were measured lack them.
          r.postgresCpuUsPerEvent ?? '–',
          r.serverCpuUsPerEvent ?? '–',
          r.commit50Ms,
          r.peakRssMb,
          r.liveHeapMb ?? '–',
        ]),
      ),
      '',
    );
  }
  if (commit) {
    lines.push(
      `## commit (${commit.end.at}, load ${commit.end.loadavg.join(' ')}, whale-alert share ${(commit.whaleAlertShare * 100).toFixed(1)}%)`,
      '',
      ...table(
        ['events/checkpoint', 'after ev/s', 'before ev/s', 'hand-written ev/s'],
        commit.rows.map((r) => [
          r.size,
          r.commitCheckpoint.eventsPerSecond,
          r.before?.eventsPerSecond ?? '–',
          r.handWritten.eventsPerSecond,
        ]),
      ),
      '',
    );
  }
  const journal = read<JournalResult>('journal');
  if (journal) {
    lines.push(
      `## reference server journal memory (${journal.end.at}, load ${journal.end.loadavg.join(' ')})`,
      '',
      ...table(
        ['tree', 'transitions', 'live appends', 'live heap after live appends MB', 'peak RSS MB'],
        journal.rows.map((r) => [r.target, r.transitions, r.live, round(r.heapAfterLiveMb), round(r.maxRssMb)]),
      ),
      '',
    );
  }
  const scale = read<ScaleResult>('scale');
  if (scale) {
    lines.push(
      `## scale through Temporal (${scale.end.at}, load ${scale.end.loadavg.join(' ')})`,
      '',
      ...table(
        ['workers', 'consumers', 'total events/s', 'speed-up vs 1 consumer'],
        scale.rows.map((r) => [r.workers, r.consumers, r.totalEventsPerSecond, r.speedup]),
      ),
      '',
    );
  }
  const alerts = read<AlertsResult>('alerts');
  if (alerts) {
    const { p99At100, sustainedRatio, exactlyOnce } = alerts.targets;
    const verdict = (met: boolean | null) => (met === null ? 'not measured' : met ? 'met' : 'not met');
    lines.push(
      `## whale alert dispatcher (${alerts.end.at}, load ${alerts.end.loadavg.join(' ')}, after ${alerts.trees.after}, ` +
        `before ${alerts.trees.before ?? '–'})`,
      '',
      ...table(
        ['target', 'value', 'verdict'],
        [
          ['p99 delay at 100 alerts/s (after) ≤ 250 ms', `${p99At100.value ?? '–'} ms`, verdict(p99At100.met)],
          ['sustained alerts/s after / before ≥ 10×', `${sustainedRatio.value ?? '–'}×`, verdict(sustainedRatio.met)],
          [
            'every key delivered exactly once',
            `${exactlyOnce.missing} missing, ${exactlyOnce.duplicates} duplicates`,
            verdict(exactlyOnce.met),
          ],
        ],
      ),
      '',
      ...table(
        ['scenario', 'tree', 'delay p50 ms', 'p99 ms', 'max ms', 'alerts/s delivered', 'dispatcher cpu µs/alert'],
        [
          ...alerts.paced.map((r) => [
            `${r.rate}/s`,
            r.target,
            r.p50Ms,
            r.p99Ms,
            r.maxMs,
            r.deliveredPerSecond,
            r.dispatcherCpuUsPerAlert,
          ]),
          ...alerts.sustained.map((r) => [
            `sustained ${r.alerts.toLocaleString('en')}`,
            r.target,
            '–',
            '–',
            '–',
            r.alertsPerSecond,
            r.dispatcherCpuUsPerAlert,
          ]),
        ],
      ),
      '',
    );
  }

  const panels: Panel[] = [];
  if (stream) {
    const everies = [...new Set(stream.rows.map((r) => r.checkpointEvery))];
    panels.push({
      title: 'stream: events/s end to end',
      xLabel: 'batches per checkpoint',
      groups: everies.map((every) => ({
        x: String(every),
        values: (['before', 'after'] as const).map((label) => ({
          label,
          value: stream.rows.find((r) => r.checkpointEvery === every && r.target === label)?.eventsPerSecond ?? null,
        })),
      })),
    });
  }
  if (commit) {
    panels.push({
      title: 'commitCheckpoint: events/s',
      xLabel: 'events per checkpoint',
      groups: commit.rows.map((r) => ({
        x: String(r.size),
        values: [
          { label: 'before', value: r.before?.eventsPerSecond ?? null },
          { label: 'after', value: r.commitCheckpoint.eventsPerSecond },
          { label: 'hand-written', value: r.handWritten.eventsPerSecond },
        ],
      })),
    });
  }
  if (panels.length > 0) {
    const when = stream?.end ?? commit!.end;
    const { svg, width, height } = chartSvg(
      panels,
      `Throughput by checkpoint size, before vs after, measured interleaved in one run (${when.at}; load ${when.loadavg.join(' ')} on ${when.cores} cores).`,
    );
    const svgPath = join(RESULTS, 'throughput.svg');
    writeFileSync(svgPath, `${svg}\n`);
    const png = renderPng(svgPath, join(RESULTS, 'throughput.png'), width, height);
    lines.push(
      png
        ? '![throughput by checkpoint size, before vs after](throughput.png)'
        : 'No headless Chromium found: the chart is bench/results/throughput.svg only.',
      '',
    );
  }
  writeFileSync(join(RESULTS, 'summary.md'), `${lines.join('\n')}\n`);
  console.log(lines.join('\n'));
}
