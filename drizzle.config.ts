// drizzle-kit generates SQL migrations from db/schema.ts: `npm run db:generate -- --name <what>`.
// Applied migrations are never edited; `npm run db:check` fails when schema and migrations drift apart.
import { defineConfig } from 'drizzle-kit';

export default defineConfig({
  dialect: 'postgresql',
  schema: './db/schema.ts',
  out: './db/migrations',
});
