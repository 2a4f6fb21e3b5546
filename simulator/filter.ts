// Filter matching (docs/protocol.md §3): which journal events a subscription or a page delivers, and the
// mappings frozen for it. Shared by the stream connections and the page endpoint.
import type { Mappings, StreamFilter } from '../protocol/codec.js';
import { compareDecimal, mulDecimal, parseDecimal, type Decimal } from '../protocol/decimal.js';
import type { JournalEvent } from './journal-types.js';

export type EventMatcher = (event: JournalEvent) => boolean;

/** The filter as a predicate over journal events (all parts optional, AND-ed). */
export function compileFilter(filter: StreamFilter): EventMatcher {
  const kinds = filter.kinds ? new Set(filter.kinds) : undefined;
  const markets = filter.markets ? new Set(filter.markets) : undefined;
  const wallets = filter.wallets ? new Set(filter.wallets) : undefined;
  const minNotional: Decimal | undefined =
    filter.minNotional !== undefined ? parseDecimal(filter.minNotional) : undefined;
  return (event) => {
    if (kinds && !kinds.has(event.kind)) return false;
    if (markets && !markets.has(String(event.data.market))) return false;
    if (wallets && !wallets.has(String(event.data.wallet))) return false;
    if (minNotional) {
      const { price, size } = event.data;
      if (typeof price !== 'string' || typeof size !== 'string') return false;
      let value: Decimal;
      try {
        value = mulDecimal(parseDecimal(price), parseDecimal(size));
      } catch {
        return false;
      }
      if (compareDecimal(value, minNotional) < 0) return false;
    }
    return true;
  };
}

/** Mappings cover every asset, or only the assets of `filter.markets` when that is set. */
export function mappingsFor(all: Mappings, filter: StreamFilter): Mappings {
  if (!filter.markets) return { ...all };
  const markets = new Set(filter.markets);
  return Object.fromEntries(Object.entries(all).filter(([, m]) => markets.has(m.market)));
}
