// Rows as raw pg returns them, derived from the drizzle schema (db/schema.ts) so queries do not restate column
// types by hand: keys are the SQL column names, a bigint arrives as a string (pg does not parse int8), and a
// nullable column may be null. Everything else is the type drizzle infers (numeric as a string, timestamptz as a
// Date, jsonb and text as their `$type`).
import type { Column, Table } from 'drizzle-orm';

type RawValue<C extends Column> =
  | (C['_']['columnType'] extends 'PgBigInt53' | 'PgBigSerial53' ? string : C['_']['data'])
  | (C['_']['notNull'] extends true ? never : null);

export type RawRow<T extends Table> = {
  [K in keyof T['_']['columns'] as T['_']['columns'][K]['_']['name']]: RawValue<T['_']['columns'][K]>;
};

/** The columns of an outer-joined table: null when no row matched. */
export type OuterJoined<R> = { [K in keyof R]: R[K] | null };
