// A fresh clone carries its own contract: docs/protocol.md and docs/design.md are cited by path, and no link or
// comment points at a document outside the repository (the shared directory next to it, whose upper-case copies
// of both documents a clone does not have).
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** Every file a clone holds (tracked, plus new files not ignored yet), binary files left out. */
function repositoryFiles(): string[] {
  const listed = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '-z'], {
    cwd: repoRoot,
    encoding: 'utf8',
    maxBuffer: 64 << 20,
  });
  return listed
    .split('\0')
    .filter((path) => path !== '' && !/\.(png|jpe?g|gif|ico|woff2?)$/i.test(path))
    .filter((path) => existsSync(join(repoRoot, path)));
}

/** Built from parts, so this file does not match itself. */
const OUTSIDE_REFERENCES = [['..', 'shared'].join('/'), ['PROTOCOL', 'md'].join('.'), ['DESIGN', 'md'].join('.')];

describe('the repository is self-contained', () => {
  const files = repositoryFiles();

  it('lists the repository (sanity)', () => {
    expect(files).toEqual(expect.arrayContaining(['README.md', 'docs/protocol.md', 'docs/design.md']));
  });

  it('no file names the shared documents outside the repository', () => {
    const hits: string[] = [];
    for (const path of files) {
      const lines = readFileSync(join(repoRoot, path), 'utf8').split('\n');
      lines.forEach((line, index) => {
        for (const reference of OUTSIDE_REFERENCES) {
          if (line.includes(reference)) hits.push(`${path}:${index + 1}: ${reference}`);
        }
      });
    }
    expect(hits).toEqual([]);
  });

  it('every relative markdown link resolves to a file inside the repository', () => {
    const broken: string[] = [];
    for (const path of files.filter((file) => file.endsWith('.md'))) {
      const text = readFileSync(join(repoRoot, path), 'utf8');
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
        if (/^(https?:|mailto:|#)/.test(target!)) continue;
        const file = resolve(repoRoot, dirname(path), decodeURI(target!.split('#')[0]!));
        const inside = !relative(repoRoot, file).startsWith('..');
        if (!inside || !existsSync(file)) broken.push(`${path}: ${target}`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('every source file the documents name by path exists', () => {
    const rooms = 'protocol|domain|db|simulator|activities|workflows|worker|cli|bench|scripts|test|deploy';
    const cited = new RegExp(`(?<![\\w./-])(?:${rooms})/[\\w./-]+\\.(?:ts|sh|sql|ya?ml|json)\\b`, 'g');
    const missing: string[] = [];
    let citations = 0;
    for (const path of files.filter((file) => file.endsWith('.md'))) {
      for (const [source] of readFileSync(join(repoRoot, path), 'utf8').matchAll(cited)) {
        citations += 1;
        if (!existsSync(join(repoRoot, source))) missing.push(`${path}: ${source}`);
      }
    }
    expect(citations).toBeGreaterThan(50);
    expect(missing).toEqual([]);
  });
});
