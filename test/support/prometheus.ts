// Reading the Prometheus text exposition format in tests: samples with their labels, and the metric names a
// dashboard or rule file queries (so both can be checked against a real scrape).
export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const SAMPLE_LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

export function parseExposition(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = SAMPLE_LINE.exec(line);
    if (!match) throw new Error(`not an exposition sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, key, value] of (match[2] ?? '').matchAll(LABEL)) labels[key!] = value!;
    samples.push({ name: match[1]!, labels, value: Number(match[3]) });
  }
  return samples;
}

function matching(samples: Sample[], name: string, labels: Record<string, string>): Sample[] {
  return samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
}

/** The one sample of `name` carrying `labels` (a subset); undefined when there is none. Throws on several. */
export function sampleValue(samples: Sample[], name: string, labels: Record<string, string>): number | undefined {
  const found = matching(samples, name, labels);
  if (found.length > 1) throw new Error(`${found.length} samples of ${name} match ${JSON.stringify(labels)}`);
  return found[0]?.value;
}

/** The sum over every sample of `name` carrying `labels` (a subset). */
export function sumSamples(samples: Sample[], name: string, labels: Record<string, string>): number {
  return matching(samples, name, labels).reduce((sum, s) => sum + s.value, 0);
}

/** Every whalehunt_/temporal_ metric name a dashboard or rule file mentions. */
export function queriedMetricNames(text: string): string[] {
  return [...new Set(text.match(/\b(?:whalehunt|temporal)_[a-z0-9_]+\b/g) ?? [])].sort();
}

/**
 * Consumer metrics with no series until their event happens (a reconnect, a decision, a held quarantine record,
 * an alert sent, failed or suppressed, a maintenance run), so a scrape of a clean run lacks them; dashboards and
 * rules may still query them. Named as scraped: a histogram by its `_bucket`, `_sum` and `_count` series.
 */
export const EVENT_ONLY_METRICS = [
  'whalehunt_reconnects_total',
  'whalehunt_decisions_total',
  'whalehunt_quarantine_held',
  'whalehunt_alerts_sent_total',
  'whalehunt_alerts_failed_total',
  'whalehunt_alerts_dead_total',
  'whalehunt_alerts_suppressed_total',
  'whalehunt_alert_delay_seconds_bucket',
  'whalehunt_alert_delay_seconds_sum',
  'whalehunt_alert_delay_seconds_count',
  // After the first maintenance run (the table sizes are there from the first scrape).
  'whalehunt_maintenance_last_run_end_timestamp_seconds',
  'whalehunt_maintenance_last_run_status',
  'whalehunt_maintenance_rows_removed_total',
];
