// The only module that knows the wire: every frame name and field name of docs/protocol.md lives here (with
// codec-filter.ts, its zod-free part that workflow code runs too).
// Decoding turns a WebSocket text message into a typed frame or a WireError that names the frame type,
// the field and the reason. A real provider schema with other spellings is dropped in here alone.
import { isAscii } from 'node:buffer';
import { z } from 'zod';
import { checkFilter, DECIMAL_MESSAGE, DECIMAL_PATTERN } from './codec-filter.js';

export type { StreamFilter } from './codec-filter.js';

export const PROTOCOL_NAME = 'whalehunt.stream/1';
export const WIRE_VERSION = 1;
export const DEFAULT_MAX_FRAME_BYTES = 1024 * 1024;

export type WireErrorCode =
  'binary_frame' | 'frame_too_large' | 'malformed_json' | 'unknown_frame_type' | 'invalid_frame';

/** A frame that cannot be accepted. Never carries the frame's content (it may hold a secret). */
export class WireError extends Error {
  override readonly name = 'WireError';
  constructor(
    readonly code: WireErrorCode,
    readonly frameType: string | undefined,
    readonly field: string | undefined,
    readonly reason: string,
  ) {
    super(`${code}${frameType ? ` in ${frameType} frame` : ''}${field ? ` at ${field}` : ''}: ${reason}`);
  }
}

const positiveInt = z.number().int().positive();
const nonNegativeInt = z.number().int().nonnegative();
const decimalString = z.string().regex(DECIMAL_PATTERN, DECIMAL_MESSAGE);
const priceString = decimalString.refine((s) => Number(s) <= 1, 'price must be within 0..1');
const nonEmpty = z.string().min(1);

export const historySchema = z.object({ id: nonEmpty, floor: nonNegativeInt, head: nonNegativeInt });
export const qualityStateSchema = z.enum(['ok', 'degraded', 'gap']);
export const deliveryModeSchema = z.enum(['replay', 'live']);
export const SUPPORTED_EVENT_KINDS = ['trade', 'correction'] as const;
export type SupportedEventKind = (typeof SUPPORTED_EVENT_KINDS)[number];

/** Data of a trade and of a correction (a correction carries the corrected values). */
export const tradeDataSchema = z.object({
  market: nonEmpty,
  asset: nonEmpty,
  side: z.enum(['BUY', 'SELL']),
  price: priceString,
  size: decimalString,
  wallet: nonEmpty,
  txHash: nonEmpty,
});
export type TradeData = z.infer<typeof tradeDataSchema>;

// kind is any string at the wire level: an unsupported kind is not malformed, it is an event the reducer
// cannot apply, and it must reach quarantine rather than vanish (docs/protocol.md §5).
const wireEventSchema = z.object({
  ordinal: positiveInt,
  eventId: nonEmpty,
  kind: nonEmpty,
  entityId: nonEmpty,
  revision: positiveInt,
  observedAt: z.string(),
  data: z.record(z.string(), z.unknown()),
});

const serverBase = { v: z.literal(WIRE_VERSION), frameSequence: positiveInt };

/** Why a token can no longer be served: the stream's `reset_required` and the page source's 410 alike. */
const resetFields = {
  reason: z.enum(['cursor_expired', 'history_unavailable', 'history_rebuilt']),
  token: z.string(),
  history: historySchema,
};

/** The stream's error codes, which the page source's errors use too. */
const errorCodeSchema = z.enum([
  'unauthorized',
  'cursor_mismatch',
  'overloaded',
  'slow_consumer',
  'stale_generation',
  'protocol_violation',
]);

const mappingSchema = z.object({ market: nonEmpty, outcome: nonEmpty });
const qualityScopeSchema = z.object({ scope: nonEmpty, state: qualityStateSchema, lastPosition: nonNegativeInt });

/** The filter as zod sees it: the one check of codec-filter.ts, so that frames and workflows agree. */
export const filterSchema = z.unknown().transform((value, ctx) => {
  const checked = checkFilter(value);
  if (checked.ok) return checked.filter;
  for (const { path, message } of checked.problems) ctx.addIssue({ code: 'custom', path, message });
  return z.NEVER;
});

export const serverFrameSchema = z.discriminatedUnion('type', [
  z.object({
    ...serverBase,
    type: z.literal('hello'),
    protocol: z.string(),
    connectionId: nonEmpty,
    stream: nonEmpty,
    history: historySchema,
  }),
  z.object({ ...serverBase, type: z.literal('authenticated'), principal: nonEmpty }),
  z.object({
    ...serverBase,
    type: z.literal('subscribed'),
    consumerId: nonEmpty,
    subscriptionId: nonEmpty,
    generation: positiveInt,
    filterHash: z.string().regex(/^sha256:[0-9a-f]{64}$/),
    startPosition: nonNegativeInt,
    cut: z.object({ position: nonNegativeInt }),
    mappings: z.record(z.string(), mappingSchema),
    sourceQuality: z.object({ asOf: nonNegativeInt, scopes: z.array(qualityScopeSchema) }),
  }),
  z.object({
    ...serverBase,
    type: z.literal('batch'),
    generation: positiveInt,
    position: positiveInt,
    deliveryMode: deliveryModeSchema,
    sourceEventCount: positiveInt,
    matchedEventCount: nonNegativeInt,
    events: z.array(wireEventSchema),
  }),
  z.object({
    ...serverBase,
    type: z.literal('checkpoint'),
    generation: positiveInt,
    position: nonNegativeInt,
    token: nonEmpty,
    batchCount: nonNegativeInt,
  }),
  z.object({
    ...serverBase,
    type: z.literal('caught_up'),
    generation: positiveInt,
    cut: z.object({ position: nonNegativeInt }),
  }),
  z.object({
    ...serverBase,
    type: z.literal('quality'),
    generation: positiveInt,
    position: positiveInt,
    scope: nonEmpty,
    state: qualityStateSchema,
    deliveryMode: deliveryModeSchema,
  }),
  z.object({
    ...serverBase,
    type: z.literal('reset_required'),
    ...resetFields,
  }),
  z.object({
    ...serverBase,
    type: z.literal('error'),
    code: errorCodeSchema,
    retryable: z.boolean(),
    retryAfterMs: nonNegativeInt.optional(),
    message: z.string(),
  }),
]);

export type ServerFrame = z.infer<typeof serverFrameSchema>;
export type ServerFrameOf<T extends ServerFrame['type']> = Extract<ServerFrame, { type: T }>;
export type WireEvent = z.infer<typeof wireEventSchema>;
export type History = z.infer<typeof historySchema>;
export type QualityState = z.infer<typeof qualityStateSchema>;
export type DeliveryMode = z.infer<typeof deliveryModeSchema>;
export type ErrorCode = ServerFrameOf<'error'>['code'];
export type ResetReason = ServerFrameOf<'reset_required'>['reason'];
export type Mappings = ServerFrameOf<'subscribed'>['mappings'];
export type QualityScope = z.infer<typeof qualityScopeSchema>;

export const startSchema = z.discriminatedUnion('mode', [
  z.object({ mode: z.literal('resume'), token: nonEmpty }),
  z.object({ mode: z.literal('live_cut') }),
  z.object({ mode: z.literal('from_floor') }),
  z.object({ mode: z.literal('rebind'), token: nonEmpty }),
]);
export type StartRequest = z.infer<typeof startSchema>;

const clientBase = { v: z.literal(WIRE_VERSION) };
export const clientFrameSchema = z.discriminatedUnion('type', [
  z.object({ ...clientBase, type: z.literal('authenticate'), apiKey: nonEmpty }),
  z.object({
    ...clientBase,
    type: z.literal('subscribe'),
    consumerId: nonEmpty,
    subscriptionId: nonEmpty,
    filter: filterSchema,
    start: startSchema,
  }),
  z.object({
    ...clientBase,
    type: z.literal('ack'),
    connectionId: nonEmpty,
    generation: positiveInt,
    position: nonNegativeInt,
    token: nonEmpty,
  }),
]);
export type ClientFrame = z.infer<typeof clientFrameSchema>;
export type ClientFrameOf<T extends ClientFrame['type']> = Extract<ClientFrame, { type: T }>;

/** A frame without the envelope fields the codec adds itself. */
export type ClientFrameBody = ClientFrame extends infer F ? (F extends ClientFrame ? Omit<F, 'v'> : never) : never;
export type ServerFrameBody = ServerFrame extends infer F ? (F extends ServerFrame ? Omit<F, 'v'> : never) : never;

function parseWith<T>(schema: z.ZodType<T>, raw: unknown, side: 'server' | 'client'): T {
  const frameType =
    typeof raw === 'object' && raw !== null && typeof (raw as { type?: unknown }).type === 'string'
      ? (raw as { type: string }).type
      : undefined;
  const result = schema.safeParse(raw);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  if (issue && issue.path.length === 1 && issue.path[0] === 'type') {
    throw new WireError('unknown_frame_type', frameType, 'type', `not a known ${side} frame type`);
  }
  const field = issue ? issue.path.map(String).join('.') : undefined;
  throw new WireError('invalid_frame', frameType, field || undefined, issue?.message ?? 'does not match the schema');
}

const BACKSLASH = 0x5c;

function parseJsonText(
  data: unknown,
  isBinary: boolean,
  maxFrameBytes: number,
): { raw: unknown; bytes: number; plainText: boolean } {
  if (isBinary)
    throw new WireError('binary_frame', undefined, undefined, 'binary messages are not part of the protocol');
  // A Buffer's length is the frame's size on the wire: checked before it is decoded, and not measured again.
  const buffer = Buffer.isBuffer(data);
  const size = buffer ? data.length : Buffer.byteLength(typeof data === 'string' ? data : String(data), 'utf8');
  if (size > maxFrameBytes) {
    throw new WireError('frame_too_large', undefined, undefined, `${size} bytes exceeds the limit of ${maxFrameBytes}`);
  }
  // An ASCII message (a stream's usually is) reads as Latin-1, its bytes copied as they are, cheaper than decoding
  // UTF-8 to the same string. Without a backslash as well, no string in it can hold an escape, a quote, a control
  // character (JSON.parse refuses one unescaped) or a character outside ASCII. Both scans are native and a
  // fraction of the parse.
  const ascii = buffer && isAscii(data);
  const text = typeof data === 'string' ? data : buffer ? data.toString(ascii ? 'latin1' : 'utf8') : String(data);
  const plainText = ascii && data.indexOf(BACKSLASH) === -1;
  try {
    return { raw: JSON.parse(text), bytes: size, plainText };
  } catch {
    throw new WireError('malformed_json', undefined, undefined, 'message is not valid JSON');
  }
}

/** A decoded server frame and the UTF-8 size of the message it came from, which staging bounds its bytes by. */
export interface DecodedServerFrame {
  frame: ServerFrame;
  bytes: number;
  /**
   * Every string in the frame is ASCII that JSON writes as is (the message is ASCII with no backslash): canonical
   * JSON of its values is their characters, which the content hash then copies without checking each one.
   */
  plainText: boolean;
}

/** Decodes one server → client WebSocket message. Throws WireError. */
export function decodeServerFrame(
  data: unknown,
  opts: { isBinary?: boolean; maxFrameBytes?: number } = {},
): DecodedServerFrame {
  const { raw, bytes, plainText } = parseJsonText(
    data,
    opts.isBinary ?? false,
    opts.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES,
  );
  return { frame: decodedBatch(raw) ?? parseWith(serverFrameSchema, raw, 'server'), bytes, plainText };
}

// ---- Fast path for `batch`, almost all of the stream's traffic. It accepts only what the zod schema accepts
// unchanged (no unknown key to strip, no `__proto__` key a record drops) and builds the same value, keys in
// schema order; anything else, valid or not, goes through zod, which produces the value or names the field.

// v, frameSequence, type, generation, position, deliveryMode, sourceEventCount, matchedEventCount, events
const BATCH_FRAME_KEYS = 9;

const isPositiveInt = (x: unknown): x is number => Number.isSafeInteger(x) && (x as number) > 0;
const isNonNegativeInt = (x: unknown): x is number => Number.isSafeInteger(x) && (x as number) >= 0;
const isNonEmptyString = (x: unknown): x is string => typeof x === 'string' && x.length > 0;

function ownKeyCount(o: object): number {
  let n = 0;
  for (const key in o) if (Object.prototype.hasOwnProperty.call(o, key)) n++;
  return n;
}

function isJsonRecord(o: unknown): o is Record<string, unknown> {
  return typeof o === 'object' && o !== null && !Array.isArray(o);
}

/** A wire event's keys in schema order: a parsed event with exactly these, in this order, is what zod returns. */
const WIRE_EVENT_KEY_ORDER = ['ordinal', 'eventId', 'kind', 'entityId', 'revision', 'observedAt', 'data'] as const;

function hasOwnKeysInOrder(o: object, keys: readonly string[]): boolean {
  let i = 0;
  for (const key in o) {
    if (!Object.prototype.hasOwnProperty.call(o, key)) continue;
    if (key !== keys[i]) return false;
    i++;
  }
  return i === keys.length;
}

function decodedWireEvent(e: unknown): WireEvent | undefined {
  if (!isJsonRecord(e)) return undefined;
  const { ordinal, eventId, kind, entityId, revision, observedAt, data } = e;
  if (
    isPositiveInt(ordinal) &&
    isNonEmptyString(eventId) &&
    isNonEmptyString(kind) &&
    isNonEmptyString(entityId) &&
    isPositiveInt(revision) &&
    typeof observedAt === 'string' &&
    isJsonRecord(data) &&
    !Object.prototype.hasOwnProperty.call(data, '__proto__')
  ) {
    // zod copies a record key by key in input order; the parsed JSON object is already that copy, and with its keys
    // in schema order (as the reference server writes them) the whole event is: it is taken as is, not copied.
    if (hasOwnKeysInOrder(e, WIRE_EVENT_KEY_ORDER)) return e as WireEvent;
    if (ownKeyCount(e) === WIRE_EVENT_KEY_ORDER.length)
      return { ordinal, eventId, kind, entityId, revision, observedAt, data };
  }
  return undefined;
}

function decodedBatch(raw: unknown): ServerFrameOf<'batch'> | undefined {
  if (!isJsonRecord(raw) || raw.type !== 'batch') return undefined;
  const { v, frameSequence, generation, position, deliveryMode, sourceEventCount, matchedEventCount, events } = raw;
  if (!(
    v === WIRE_VERSION &&
    isPositiveInt(frameSequence) &&
    isPositiveInt(generation) &&
    isPositiveInt(position) &&
    (deliveryMode === 'replay' || deliveryMode === 'live') &&
    isPositiveInt(sourceEventCount) &&
    isNonNegativeInt(matchedEventCount) &&
    Array.isArray(events) &&
    ownKeyCount(raw) === BATCH_FRAME_KEYS
  )) {
    return undefined;
  }
  // The parsed array too is kept unless an event had to be copied.
  let copied: WireEvent[] | undefined;
  for (let i = 0; i < events.length; i++) {
    const item: unknown = events[i];
    const event = decodedWireEvent(item);
    if (!event) return undefined;
    if (event !== item) copied ??= (events as WireEvent[]).slice(0, i);
    copied?.push(event);
  }
  return {
    v,
    frameSequence,
    type: 'batch',
    generation,
    position,
    deliveryMode,
    sourceEventCount,
    matchedEventCount,
    events: copied ?? (events as WireEvent[]),
  };
}

/** Decodes one client → server WebSocket message (used by the reference server). Throws WireError. */
export function decodeClientFrame(
  data: unknown,
  opts: { isBinary?: boolean; maxFrameBytes?: number } = {},
): ClientFrame {
  const { raw } = parseJsonText(data, opts.isBinary ?? false, opts.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES);
  return parseWith(clientFrameSchema, raw, 'client');
}

export function encodeClientFrame(frame: ClientFrameBody): string {
  return JSON.stringify({ v: WIRE_VERSION, ...frame });
}

export function encodeServerFrame(frame: ServerFrameBody): string {
  return JSON.stringify({ v: WIRE_VERSION, ...frame });
}

/** Parses the data of a supported event kind; throws WireError naming the field when it is malformed. */
export function parseTradeData(kind: SupportedEventKind, data: unknown): TradeData {
  // Every staged trade passes here: check well-formed data by hand, and let zod find and name what is wrong.
  const fast = wellFormedTradeData(data);
  if (fast) return fast;
  const result = tradeDataSchema.safeParse(data);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  throw new WireError(
    'invalid_frame',
    'batch',
    `events.data.${issue?.path.map(String).join('.') ?? ''}`,
    `${kind}: ${issue?.message ?? 'invalid'}`,
  );
}

/** What tradeDataSchema returns for valid data (known keys in schema order, others stripped), else undefined. */
function wellFormedTradeData(data: unknown): TradeData | undefined {
  if (!isJsonRecord(data)) return undefined;
  const { market, asset, side, price, size, wallet, txHash } = data;
  if (
    isNonEmptyString(market) &&
    isNonEmptyString(asset) &&
    (side === 'BUY' || side === 'SELL') &&
    typeof price === 'string' &&
    DECIMAL_PATTERN.test(price) &&
    Number(price) <= 1 &&
    typeof size === 'string' &&
    DECIMAL_PATTERN.test(size) &&
    isNonEmptyString(wallet) &&
    isNonEmptyString(txHash)
  ) {
    // Exactly these keys in schema order (as the reference server writes them) is what zod returns: taken as is.
    if (hasOwnKeysInOrder(data, TRADE_DATA_KEY_ORDER)) return data as TradeData;
    return { market, asset, side, price, size, wallet, txHash };
  }
  return undefined;
}

const TRADE_DATA_KEY_ORDER = ['market', 'asset', 'side', 'price', 'size', 'wallet', 'txHash'] as const;

export function isSupportedKind(kind: string): kind is SupportedEventKind {
  return (SUPPORTED_EVENT_KINDS as readonly string[]).includes(kind);
}

// ---- Section 8: the paginated history source (HTTP). Added for the reference server and page readers. ----

/** The WebSocket endpoint path and the page endpoint of a stream. */
export const STREAM_PATH = '/v1/stream';
export function pagePath(stream: string): string {
  return `/v1/streams/${encodeURIComponent(stream)}/events`;
}
/** Query parameter names of the page endpoint; `filter` carries the filter as canonical JSON. */
export const PAGE_QUERY = { cursor: 'cursor', limit: 'limit', filter: 'filter' } as const;

const BEARER = 'Bearer ';
/** The page endpoint's `Authorization` value: the API key as a bearer token (the stream sends it in `authenticate`). */
export function pageAuthorization(apiKey: string): string {
  return `${BEARER}${apiKey}`;
}
/** The API key of an `Authorization` header; '' when it is absent or not a bearer token. */
export function apiKeyOfPageAuthorization(header: string | undefined): string {
  return header?.startsWith(BEARER) ? header.slice(BEARER.length) : '';
}

const pageEventSchema = wireEventSchema.extend({ position: positiveInt });
export type PageEvent = z.infer<typeof pageEventSchema>;

/** 200: events in journal order (position, ordinal); `next` is the cursor to fetch next. */
export const pageResponseSchema = z.object({
  events: z.array(pageEventSchema),
  next: nonEmpty,
  history: historySchema,
});
export type PageResponse = z.infer<typeof pageResponseSchema>;

/** 410: the cursor can no longer be served (same meaning as the stream's `reset_required`). */
export const pageResetSchema = z.object(resetFields);
export type PageReset = z.infer<typeof pageResetSchema>;

/** 4xx/5xx other than 410: `code` uses the stream's error codes. */
export const pageErrorSchema = z.object({
  code: errorCodeSchema,
  message: z.string(),
});
export type PageError = z.infer<typeof pageErrorSchema>;

export function decodePageResponse(raw: unknown): PageResponse {
  return parseWith(pageResponseSchema, raw, 'server');
}
export function decodePageReset(raw: unknown): PageReset {
  return parseWith(pageResetSchema, raw, 'server');
}
export function decodePageError(raw: unknown): PageError {
  return parseWith(pageErrorSchema, raw, 'server');
}
