// The one-statement commit comes in variants that leave out the parts a run does not need (db/commit-sql.ts,
// fastCommitStatement). What each writes is held to the read-decide-write transaction by test/db/model.test.ts;
// here every combination must be a statement Postgres accepts, with the same 42 parameters typed alike, so that a
// run of a rare shape (a quality notice and a correction but no whale, say) cannot meet a syntax or type error.
import { describe, expect, it } from 'vitest';
import { fastCommitStatement } from '../../db/commit-sql.js';
import { useTestDatabase } from '../support/db.js';

const db = useTestDatabase();

describe('the one-statement commit, part by part', () => {
  it('prepares in every combination of parts, each with the same parameter types', async () => {
    const client = await db.pool.connect();
    try {
      const typesOf = new Map<string, string[]>();
      const names = new Set<string>();
      for (let bits = 0; bits < 16; bits++) {
        const parts = {
          updates: (bits & 1) !== 0,
          revisions: (bits & 2) !== 0,
          outbox: (bits & 4) !== 0,
          quality: (bits & 8) !== 0,
        };
        const { name, text } = fastCommitStatement(parts);
        names.add(name);
        await client.query(`PREPARE variant AS ${text}`);
        const { rows } = await client.query<{ types: string[] }>(
          `SELECT parameter_types::text[] AS types FROM pg_prepared_statements WHERE name = 'variant'`,
        );
        await client.query('DEALLOCATE variant');
        typesOf.set(JSON.stringify(parts), rows[0]!.types);
        for (const [table, included] of [
          ['execution_revisions', parts.revisions],
          ['outbox', parts.outbox],
          ['source_quality', parts.quality],
        ] as const)
          expect(text.includes(`INSERT INTO ${table} `), `${table} in ${JSON.stringify(parts)}`).toBe(included);
      }
      expect(names.size).toBe(16);
      const all = [...typesOf.values()];
      expect(all[0]).toHaveLength(42);
      for (const types of all) expect(types).toEqual(all[0]);
    } finally {
      client.release();
    }
  });
});
