// The README's commands that register the search attributes in a namespace (Temporal Cloud, a self-hosted
// cluster) name every attribute the workflows set: a namespace missing one fails the consumer's first upsert.
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { SEARCH_ATTRIBUTES } from '../../workflows/definitions.js';

const readme = readFileSync(resolve(dirname(fileURLToPath(import.meta.url)), '../../README.md'), 'utf8');

describe('README search attribute registration', () => {
  const blocks = [...readme.matchAll(/```sh\n([\s\S]*?)```/g)]
    .map(([, body]) => body!)
    .filter((body) => /search-attribute/.test(body));

  it('has a command for Temporal Cloud (tcld) and one for a self-hosted cluster (temporal operator)', () => {
    expect(blocks.some((body) => body.includes('tcld namespace search-attributes add'))).toBe(true);
    expect(blocks.some((body) => body.includes('temporal operator search-attribute create'))).toBe(true);
  });

  it('each names every attribute, as Keyword', () => {
    for (const body of blocks) {
      for (const [name, type] of Object.entries(SEARCH_ATTRIBUTES)) {
        expect(body).toMatch(new RegExp(`${name}(=| --type )${type}`));
      }
    }
  });
});
