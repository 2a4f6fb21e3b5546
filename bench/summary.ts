// The summary of a `npm run bench -- all`: bench/results/summary.md (the headline figures of every result
// present, before vs after) and throughput.svg / throughput.png (throughput by checkpoint size, before vs after).
// The PNG is the SVG rendered by a headless Chromium when one is installed (no npm dependency for a chart).
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { AlertsPacedRow, AlertsSustainedRow, AlertsTargets } from './alerts.js';
import type { CpuRow } from './cpu.js';
import type { CommitLeanRow } from './commit-lean.js';
import type { MemoryResult as MemoryFigures } from './memory.js';
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
  /** absent in results written before the machine stamp */
  end?: MachineState;
  rows?: CommitLeanRow[];
}
interface TemporalResult {
  end: MachineState;
  rows: TemporalRow[];
}
type MemoryResult = Partial<MemoryFigures> & { end: MachineState };
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
  /** ratioToMinimal and minimalEventsPerSecond are absent in results from before start-up was excluded */
  rows: {
    workers: number;
    consumers: number;
    eventsPerSecond?: number;
    minimalEventsPerSecond?: number;
    ratioToMinimal?: number;
    speedup: number;
  }[];
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

const COLOURS: Record<string, string> = {
  before: '#9aa5b1',
  after: '#2f6fde',
  'hand-written': '#e3a33b',
  minimal: '#e3a33b',
};
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

/** Where a result was measured: absolute figures only compare on the same CPU. */
function stamp(m: MachineState): string {
  return `${m.cpuModel}, ${m.cores} cores, load ${m.loadavg.join(' ')}`;
}

/** One line of the ratio table: what is compared, the target, the measured value, whether it is met. */
interface Ratio {
  measure: string;
  target: string;
  measured: string;
  met: boolean | null;
}

/**
 * Issue 22's table: each goal as a ratio to an anchor measured in the same run, from the results present
 * ('not measured' where one is missing or predates the measure).
 */
function ratioTable(): string[] {
  const temporal = read<TemporalResult>('temporal');
  const lean = read<CommitLeanResult>('commit-lean');
  const memory = read<MemoryResult>('memory');
  const scale = read<ScaleResult>('scale');
  const temporalRow = (every: number, target: string) =>
    temporal?.rows.find((r) => r.checkpointEvery === every && r.target === target);
  // Judged on the value as measured, not as shown: 0.502 shown as 0.5 would read as on the line. Two decimals,
  // or three where two would put the value on the other side of its line.
  const ratio = (measure: string, target: string, value: number | null | undefined, met: (v: number) => boolean) => {
    if (value === null || value === undefined) return { measure, target, measured: 'not measured', met: null };
    const shown = met(round(value, 2)) === met(value) ? round(value, 2) : round(value, 3);
    return { measure, target, measured: `${shown}×`, met: met(value) };
  };
  const machine = (target: string) => temporalRow(1000, target)?.machineCpuUsPerEvent;
  const over = (a: number | null | undefined, b: number | null | undefined) =>
    a === null || a === undefined || b === null || b === undefined ? null : a / b;
  const leanAt = (size: number) => lean?.rows?.find((r) => r.size === size)?.ratio;
  const rows: Ratio[] = [
    ratio(
      'end to end through Temporal / minimal consumer, 1,000-transition checkpoints',
      '≥ 0.75×',
      temporalRow(1000, 'after')?.ratioToMinimal,
      (v) => v >= 0.75,
    ),
    ratio(
      'end to end through Temporal / minimal consumer, 10-transition checkpoints',
      '≥ 0.75×',
      temporalRow(10, 'after')?.ratioToMinimal,
      (v) => v >= 0.75,
    ),
    ratio(
      'machine CPU per event (worker + Postgres + servers), ours / baseline tree, 1,000-transition checkpoints',
      '≤ 0.5×',
      over(machine('after'), machine('before')),
      (v) => v <= 0.5,
    ),
    ratio(
      'machine CPU per event, ours through Temporal / minimal consumer, 1,000-transition checkpoints',
      '≤ 1.5×',
      over(machine('after'), machine('minimal')),
      (v) => v <= 1.5,
    ),
    ratio(
      'commitCheckpoint / leanest fenced statement, 100 events (10% whales)',
      '≥ 0.8×',
      leanAt(100),
      (v) => v >= 0.8,
    ),
    ratio(
      'commitCheckpoint / leanest fenced statement, 1,000 events (10% whales)',
      '≥ 0.8×',
      leanAt(1000),
      (v) => v >= 0.8,
    ),
  ];
  const m = memory?.targets ? (memory as MemoryFigures) : null;
  if (m) {
    rows.push(
      {
        measure: `worker peak RSS over a ${m.transitions.toLocaleString('en')}-transition replay vs bare worker idle`,
        target: `≤ bare idle + 128 MiB (${m.targets.peakMib} MiB)`,
        measured:
          `${m.peakRssMib} MiB (bare idle ${m.bareIdleRssMib}, ours idle ${m.workerIdleRssMib}; ` +
          (m.v8Growth
            ? `${m.cpuUsPerEvent} worker µs/event; with HEAP_GROWTH_PERCENT off ${m.v8Growth.peakRssMib} MiB, ` +
              `${m.v8Growth.cpuUsPerEvent} µs/event)`
            : 'HEAP_GROWTH_PERCENT not measured)'),
        met: m.targets.peakMet,
      },
      {
        measure: 'worker RSS flat: last quarter of the replay / first quarter',
        target: 'within ±10%',
        measured: `${m.lastQuarterMib} / ${m.firstQuarterMib} MiB (${round(m.targets.flat * 100)}%)`,
        met: m.targets.flatMet,
      },
    );
  } else
    rows.push({
      measure: 'worker RSS vs bare worker idle',
      target: '≤ idle + 128 MiB, flat',
      measured: 'not measured',
      met: null,
    });
  const scaleRows = scale?.rows.filter((r) => r.workers === 1 && r.ratioToMinimal !== undefined) ?? [];
  rows.push({
    measure: 'scale, 1 worker: events/s start-up excluded / minimal × N',
    target: 'reported at 1, 10, 50',
    measured:
      scaleRows.length === 0
        ? 'not measured'
        : scaleRows.map((r) => `${r.ratioToMinimal}× at ${r.consumers}`).join(', '),
    met: scaleRows.length === 0 ? null : [1, 10, 50].every((n) => scaleRows.some((r) => r.consumers === n)),
  });
  const sources = (
    [
      ['temporal', temporal?.end],
      ['commit-lean', lean?.end],
      ['memory', memory?.end],
      ['scale', scale?.end],
    ] as const
  )
    .map(([name, m]) => (m ? `${name} ${m.at} (${stamp(m)})` : `${name} missing`))
    .join('; ');
  const loaded = [temporal?.end, lean?.end, memory?.end, scale?.end].some(
    (m) => m && Math.max(...m.loadavg.slice(0, 2)) > m.cores,
  );
  return [
    '## ratios to anchors measured in the same run (issue 22)',
    '',
    ...table(
      ['measure', 'target', 'measured', 'met?'],
      rows.map((r) => [r.measure, r.target, r.measured, r.met === null ? '–' : r.met ? 'yes' : 'no']),
    ),
    '',
    `From bench/results: ${sources}.`,
    ...(loaded
      ? [
          '',
          "**The load average exceeded the core count during these runs.** The benches' own processes count toward it",
          '(scale runs up to 50 consumers and two workers), so it does not prove that other work shared the machine;',
          'where it did, every figure, the anchors included, is slower than on a quiet machine, and ratios hold better',
          'than absolutes.',
        ]
      : []),
    '',
  ];
}

export function writeSummary(): void {
  const cpu = read<CpuResult>('cpu');
  const stream = read<StreamResult>('stream');
  const commit = read<CommitResult>('commit');
  const lines = [
    '# benchmark summary',
    '',
    ...ratioTable(),
    'The sections below are absolute figures: each is labelled with the CPU it was measured on and compares only',
    'with figures from the same CPU (the README says how to read them on another machine).',
    '',
  ];
  if (cpu) {
    lines.push(
      `## client CPU per event (${cpu.end.at}; ${stamp(cpu.end)})`,
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
      `## stream, end to end (${stream.end.at}; ${stamp(stream.end)})`,
      '',
      ...table(
        [
          'checkpointEvery',
          'tree',
          'events/s',
          'client cpu µs/event',
          'postgres cpu µs/event',
          'server cpu µs/event',
          'machine cpu µs/event',
          'commit p50 ms',
          'peak RSS MB',
          'live heap MB',
          'scavenged B/event',
          'gc pause µs/event',
        ],
        stream.rows.map((r) => [
          r.checkpointEvery,
          r.target,
          r.eventsPerSecond,
          r.cpuUsPerEvent,
          // Results written before these were measured lack them.
          r.postgresCpuUsPerEvent ?? '–',
          r.serverCpuUsPerEvent ?? '–',
          r.machineCpuUsPerEvent ?? '–',
          r.commit50Ms,
          r.peakRssMb,
          r.liveHeapMb ?? '–',
          r.scavengedBytesPerEvent ?? '–',
          r.gcPauseUsPerEvent ?? '–',
        ]),
      ),
      '',
    );
  }
  const temporal = read<TemporalResult>('temporal');
  if (temporal) {
    lines.push(
      `## through Temporal, one consumer (${temporal.end.at}; ${stamp(temporal.end)})`,
      '',
      ...table(
        [
          'checkpointEvery',
          'tree',
          'through Temporal ev/s',
          'in-process ev/s',
          'vs minimal',
          'worker cpu µs/event',
          'machine cpu µs/event',
        ],
        temporal.rows.map((r) => [
          // Results written before the minimal anchor lack these.
          r.checkpointEvery ?? '–',
          r.target,
          r.temporalEventsPerSecond ?? '–',
          r.inProcessEventsPerSecond,
          r.ratioToMinimal ?? '–',
          r.workerCpuUsPerEvent ?? '–',
          r.machineCpuUsPerEvent ?? '–',
        ]),
      ),
      '',
    );
  }
  if (commit) {
    lines.push(
      `## commit (${commit.end.at}; ${stamp(commit.end)}; whale-alert share ${(commit.whaleAlertShare * 100).toFixed(1)}%)`,
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
      `## reference server journal memory (${journal.end.at}; ${stamp(journal.end)})`,
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
      `## scale through Temporal (${scale.end.at}; ${stamp(scale.end)})`,
      '',
      ...table(
        ['workers', 'consumers', 'events/s (start-up excluded)', 'minimal x N events/s', 'speed-up vs 1 consumer'],
        scale.rows.map((r) => [
          r.workers,
          r.consumers,
          r.eventsPerSecond ?? '–',
          r.minimalEventsPerSecond ?? '–',
          r.speedup,
        ]),
      ),
      '',
    );
  }
  const alerts = read<AlertsResult>('alerts');
  if (alerts) {
    const { p99At100, sustainedRatio, exactlyOnce } = alerts.targets;
    const verdict = (met: boolean | null) => (met === null ? 'not measured' : met ? 'met' : 'not met');
    lines.push(
      `## whale alert dispatcher (${alerts.end.at}; ${stamp(alerts.end)}; after ${alerts.trees.after}, ` +
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
        values: (['before', 'after', 'minimal'] as const).map((label) => ({
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
      `Throughput by checkpoint size, before vs after (and the minimal consumer), measured interleaved in one run (${when.at}; ${stamp(when)}).`,
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
