// The worker is started with worker/node-flags.ts's flags wherever the repository starts it for operators: the
// npm script, the image, and the main job (`npm start`), whose worker runs in process. A flag changed in one place
// and not the others would measure one worker and ship another.
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { WORKER_NODE_FLAGS } from '../../worker/node-flags.js';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

describe('the worker launch', () => {
  it("npm run worker passes the worker's Node flags, then the compiled entry point", () => {
    const { scripts } = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as {
      scripts: Record<string, string>;
    };
    expect(scripts.worker).toBe(['node', ...WORKER_NODE_FLAGS, 'dist/worker/main.js'].join(' '));
  });

  it("the image's CMD is the same command", () => {
    const cmd = /^CMD\s+(\[.*\])\s*$/m.exec(readFileSync(join(repoRoot, 'Dockerfile'), 'utf8'))?.[1];
    expect(JSON.parse(cmd ?? 'null')).toEqual(['node', ...WORKER_NODE_FLAGS, 'dist/worker/main.js']);
  });

  it('npm start hands them to the main job through NODE_OPTIONS, after any the user set', () => {
    const start = readFileSync(join(repoRoot, 'scripts/start.sh'), 'utf8');
    expect(start).toContain(`export NODE_OPTIONS="\${NODE_OPTIONS:+$NODE_OPTIONS }${WORKER_NODE_FLAGS.join(' ')}"`);
    // Exported before the job starts, not after.
    expect(start.indexOf('export NODE_OPTIONS=')).toBeLessThan(start.indexOf('exec npx tsx cli/main.ts run'));
  });
});
