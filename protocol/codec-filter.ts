// The codec's part that workflow code also runs: the subscription filter's shape and its check. It is written
// without zod on purpose: an operator's rebind request is checked inside the workflow sandbox, and zod in the
// workflow bundle costs the worker ~16 MiB of resident memory (issue 22; measured at idle in d521f8a).

/** What a subscription selects; an empty filter selects everything. */
export interface StreamFilter {
  kinds?: string[];
  markets?: string[];
  wallets?: string[];
  /** a plain-notation decimal string */
  minNotional?: string;
}

/** A decimal in plain notation: no exponent, no sign for our money fields. */
export const DECIMAL_PATTERN = /^\d+(\.\d+)?$/;
export const DECIMAL_MESSAGE = 'must be a non-negative decimal string such as "0.42"';

/** One thing wrong with an input: where (keys and indexes from its root) and what. */
export interface InputProblem {
  path: (string | number)[];
  message: string;
}

/** A JSON object: not null, not an array. */
export function isJsonObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A problem at `path`.index for each item of `list` that is not a non-empty string. */
export function blankNameProblems(list: unknown[], path: (string | number)[]): InputProblem[] {
  const problems: InputProblem[] = [];
  list.forEach((item, index) => {
    if (typeof item !== 'string' || item.length === 0) {
      problems.push({ path: [...path, index], message: 'must be a non-empty string' });
    }
  });
  return problems;
}

const LIST_KEYS = ['kinds', 'markets', 'wallets'] as const;
const FILTER_KEYS: readonly string[] = [...LIST_KEYS, 'minNotional'];

export type FilterCheck = { ok: true; filter: StreamFilter } | { ok: false; problems: InputProblem[] };

/**
 * `value` as a filter (a copy with its keys in the documented order, so that equal filters look alike), or every
 * problem it has. Unknown keys are refused, not dropped: a misspelt key would otherwise widen the subscription.
 */
export function checkFilter(value: unknown): FilterCheck {
  if (!isJsonObject(value)) {
    return { ok: false, problems: [{ path: [], message: 'must be an object such as {"markets":["0x…"]}' }] };
  }
  const record = value;
  const problems: InputProblem[] = [];
  const unknown = Object.keys(record).filter((key) => !FILTER_KEYS.includes(key));
  if (unknown.length > 0) {
    const names = unknown.map((key) => JSON.stringify(key)).join(', ');
    problems.push({ path: [], message: `Unrecognized key${unknown.length > 1 ? 's' : ''}: ${names}` });
  }
  const filter: StreamFilter = {};
  for (const key of LIST_KEYS) {
    const list = record[key];
    if (list === undefined) continue;
    if (!Array.isArray(list)) {
      problems.push({ path: [key], message: 'must be a list of non-empty strings' });
      continue;
    }
    problems.push(...blankNameProblems(list, [key]));
    filter[key] = [...(list as string[])];
  }
  const minNotional = record.minNotional;
  if (minNotional !== undefined) {
    if (typeof minNotional === 'string' && DECIMAL_PATTERN.test(minNotional)) filter.minNotional = minNotional;
    else problems.push({ path: ['minNotional'], message: DECIMAL_MESSAGE });
  }
  return problems.length > 0 ? { ok: false, problems } : { ok: true, filter };
}
