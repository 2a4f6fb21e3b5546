// package.json "engines" against the lockfile: the LTS lines 22 and 24 are accepted (20 too, while these
// machines run it), and every locked package accepts the lowest version of each line that ours accepts and a
// late one of it, so `npm ci` prints no EBADENGINE warning on any supported Node.
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import semver from 'semver';
import { describe, expect, it } from 'vitest';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const readJson = (path: string) => JSON.parse(readFileSync(join(root, path), 'utf8')) as unknown;
const ours = (readJson('package.json') as { engines: { node: string } }).engines.node;
const lock = readJson('package-lock.json') as {
  packages: Record<string, { version?: string; engines?: { node?: string } | string[] }>;
};

const LINES = [20, 22, 24];

/** The lowest version of `major` that `range` accepts, or null when it accepts none. */
function lowestIn(range: string, major: number): string | null {
  const within = new semver.Range(`>=${major}.0.0 <${major + 1}.0.0`);
  const lows = new semver.Range(range).set
    .map((comparators) => semver.minVersion(comparators.map((c) => c.value).join(' ') || '*'))
    .map((low) => (low && low.major < major ? new semver.SemVer(`${major}.0.0`) : low))
    .filter((low): low is semver.SemVer => low !== null && within.test(low) && semver.satisfies(low, range));
  return lows.sort(semver.compare)[0]?.version ?? null;
}

describe('engines', () => {
  it('accepts Node 20, 22 and 24, and the Node running this test', () => {
    for (const major of LINES) expect(lowestIn(ours, major), `Node ${major} in "${ours}"`).not.toBeNull();
    expect(semver.satisfies(process.version, ours), `${process.version} in "${ours}"`).toBe(true);
  });

  it('no locked package refuses a Node version ours accepts', () => {
    const versions = LINES.flatMap((major) => [lowestIn(ours, major)!, `${major}.999.0`]);
    const refusals = Object.entries(lock.packages).flatMap(([path, entry]) => {
      // Old packages wrote engines as an array; npm ignores that form.
      const range = Array.isArray(entry.engines) ? undefined : entry.engines?.node;
      if (path === '' || range === undefined) return [];
      const refused = versions.filter((version) => !semver.satisfies(version, range));
      return refused.length ? [`${path}@${entry.version} (node ${range}) refuses ${refused.join(', ')}`] : [];
    });
    expect(refusals).toEqual([]);
  });
});
