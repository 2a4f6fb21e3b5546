// The journal's file: JSON lines, a header record (what rebuilds the generator and the history) and then one
// record per retained transition, in journal order. Written and read streaming: a journal may be large.
import { createReadStream } from 'node:fs';
import { open } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { z } from 'zod';
import type { UniverseSize } from './journal-generator.js';
import { JournalError, type Transition } from './journal-types.js';

const journalEventSchema = z.object({
  ordinal: z.number().int().positive(),
  eventId: z.string().min(1),
  kind: z.string().min(1),
  entityId: z.string().min(1),
  revision: z.number().int().positive(),
  observedAt: z.string(),
  data: z.record(z.string(), z.unknown()),
});
const qualityChangeSchema = z.object({ scope: z.string().min(1), state: z.enum(['ok', 'degraded', 'gap']) });
const headerRecordSchema = z.object({
  record: z.literal('header'),
  historyId: z.string().min(1),
  floor: z.number().int().positive(),
  seed: z.number().int(),
  scopes: z.array(z.string().min(1)),
  universe: z.object({
    markets: z.number().int().positive(),
    whales: z.number().int().positive(),
    smallWallets: z.number().int().positive(),
  }),
});
const transitionRecordSchema = z.object({
  record: z.literal('transition'),
  position: z.number().int().positive(),
  events: z.array(journalEventSchema).min(1),
  quality: z.array(qualityChangeSchema),
});

/** The header record's fields. */
export interface JournalHeader {
  historyId: string;
  floor: number;
  seed: number;
  scopes: readonly string[];
  universe: UniverseSize;
}

/** Writes the header and every transition, a line each. */
export async function writeJournalFile(
  file: string,
  header: JournalHeader,
  transitions: Iterable<Transition>,
): Promise<void> {
  const { historyId, floor, seed, scopes, universe } = header;
  const handle = await open(file, 'w');
  try {
    let chunk = `${JSON.stringify({ record: 'header', historyId, floor, seed, scopes, universe })}\n`;
    for (const t of transitions) {
      chunk += `${JSON.stringify({ record: 'transition', ...t })}\n`;
      if (chunk.length > 1 << 20) {
        await handle.write(chunk, null, 'utf8');
        chunk = '';
      }
    }
    await handle.write(chunk, null, 'utf8');
  } finally {
    await handle.close();
  }
}

/**
 * Reads a file `writeJournalFile` wrote: its header, then its transitions as they are read. Throws
 * JournalError('invalid_journal_file') naming the line that is not what the format says.
 */
export async function readJournalFile(
  file: string,
): Promise<{ header: JournalHeader; transitions: AsyncGenerator<Transition> }> {
  const lines = jsonLines(file);
  const first = await lines.next();
  if (first.done) throw new JournalError('invalid_journal_file', `${file} is empty`);
  const header = headerRecordSchema.safeParse(first.value.json);
  if (!header.success) {
    await lines.return(undefined);
    throw new JournalError('invalid_journal_file', `${file}:${first.value.lineNo} must be the header record`);
  }
  const { record: _record, ...fields } = header.data;
  return { header: fields, transitions: transitionsOf(file, lines) };
}

async function* transitionsOf(file: string, lines: AsyncGenerator<JsonLine>): AsyncGenerator<Transition> {
  for await (const { json, lineNo } of lines) {
    const parsed = transitionRecordSchema.safeParse(json);
    if (!parsed.success)
      throw new JournalError(
        'invalid_journal_file',
        `${file}:${lineNo}: ${parsed.error.issues[0]?.message ?? 'invalid transition'}`,
      );
    const { record: _record, ...transition } = parsed.data;
    yield transition;
  }
}

interface JsonLine {
  json: unknown;
  lineNo: number;
}

/** The file's non-blank lines, each parsed as JSON. */
async function* jsonLines(file: string): AsyncGenerator<JsonLine> {
  const lines = createInterface({ input: createReadStream(file, 'utf8'), crlfDelay: Infinity });
  let lineNo = 0;
  for await (const line of lines) {
    lineNo += 1;
    if (line.trim() === '') continue;
    let json: unknown;
    try {
      json = JSON.parse(line);
    } catch {
      throw new JournalError('invalid_journal_file', `${file}:${lineNo} is not valid JSON`);
    }
    yield { json, lineNo };
  }
}
