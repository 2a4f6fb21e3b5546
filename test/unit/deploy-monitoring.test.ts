// The shipped Grafana dashboard and Prometheus alert rules, checked with real tools: promtool validates the rules
// and runs their unit tests, and lints a metrics sample scraped from a real worker (test/e2e/metrics.test.ts
// scrapes a live one); every metric the dashboard or the rules query is one the worker exports.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { METRIC_NAMES } from '../../activities/metrics.js';
import { EVENT_ONLY_METRICS, parseExposition, queriedMetricNames } from '../support/prometheus.js';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const read = (path: string) => readFileSync(join(root, path), 'utf8');
const promtool = (args: string[], input?: string) =>
  execFileSync('promtool', args, { cwd: join(root, 'deploy/prometheus'), encoding: 'utf8', input, stdio: 'pipe' });

const sample = read('test/fixtures/metrics-sample.prom');
const exported = new Set([...parseExposition(sample).map((s) => s.name), ...EVENT_ONLY_METRICS]);

interface Panel {
  title: string;
  type: string;
  targets: { refId: string; expr: string }[];
}

describe('deploy/prometheus alert rules', () => {
  it('pass promtool check rules', () => {
    expect(promtool(['check', 'rules', 'alerts.yml'])).toContain('SUCCESS: 9 rules found');
  });

  it('pass their promtool unit tests (each alert fires when it should and not before)', () => {
    expect(promtool(['test', 'rules', 'alerts.test.yml'])).toContain('SUCCESS');
    const tests = read('deploy/prometheus/alerts.test.yml');
    for (const [, alert] of read('deploy/prometheus/alerts.yml').matchAll(/alert: (\w+)\n/g))
      expect(tests, alert).toMatch(new RegExp(`alertname: ${alert}\\n[\\s\\S]*?exp_alerts:\\n +- exp_labels`));
  });

  it('cover lag, decisions, quarantine, reconnects, dead, stuck or late whale alerts and maintenance, on exported metrics', () => {
    const rules = read('deploy/prometheus/alerts.yml');
    const covered = [
      'LagGrowing',
      'AwaitingDecision',
      'QuarantineHeld',
      'ReconnectStorm',
      'AlertsDead',
      'AlertsStuck',
      'AlertDelayHigh',
      'MaintenanceFailed',
      'MaintenanceStale',
    ];
    for (const alert of covered) expect(rules).toMatch(new RegExp(`alert: Whalehunt\\w*${alert}\\n`));
    expect(queriedMetricNames(rules).filter((name) => !exported.has(name))).toEqual([]);
  });
});

describe('the scraped metrics sample', () => {
  it('passes promtool check metrics', () => {
    promtool(['check', 'metrics'], sample);
  });

  it('carries every consumer metric that exists from the first commit, and the SDK worker metrics', () => {
    const names = [...exported];
    for (const name of Object.values(METRIC_NAMES)) {
      expect(
        names.some((n) => n === name || n.startsWith(`${name}_`)),
        name,
      ).toBe(true);
    }
    expect(names).toContain('temporal_worker_task_slots_available');
  });
});

describe('deploy/grafana dashboard', () => {
  const dashboard = JSON.parse(read('deploy/grafana/whalehunt-dashboard.json')) as { uid: string; panels: Panel[] };

  it('is a dashboard whose every panel has Prometheus queries', () => {
    expect(dashboard.uid).toBe('whalehunt-consumer');
    expect(dashboard.panels.length).toBeGreaterThan(8);
    for (const panel of dashboard.panels) {
      expect(panel.targets.length, panel.title).toBeGreaterThan(0);
      for (const target of panel.targets)
        expect(queriedMetricNames(target.expr).length, panel.title).toBeGreaterThan(0);
    }
  });

  it('queries only metrics the worker exports', () => {
    const queried = dashboard.panels.flatMap((p) => p.targets.flatMap((t) => queriedMetricNames(t.expr)));
    expect(queried.filter((name) => !exported.has(name))).toEqual([]);
  });
});
