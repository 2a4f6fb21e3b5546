import { afterEach, describe, expect, it, vi } from 'vitest';
import { DUPLICATE_SIGNAL_MS, onShutdownSignal } from '../../worker/shutdown-signal.js';

describe('onShutdownSignal', () => {
  afterEach(() => vi.useRealTimers());

  function listen() {
    const calls: string[] = [];
    const off = onShutdownSignal({
      graceful: (signal) => calls.push(`graceful ${signal}`),
      forced: (signal) => calls.push(`forced ${signal}`),
    });
    return { calls, off };
  }

  it('one Ctrl-C delivered twice (terminal and tsx relay) is one graceful stop; a later one forces', () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const { calls, off } = listen();
    try {
      process.emit('SIGINT', 'SIGINT');
      vi.advanceTimersByTime(DUPLICATE_SIGNAL_MS - 1);
      process.emit('SIGINT', 'SIGINT');
      expect(calls).toEqual(['graceful SIGINT']);
      vi.advanceTimersByTime(1);
      process.emit('SIGTERM', 'SIGTERM');
      expect(calls).toEqual(['graceful SIGINT', 'forced SIGTERM']);
    } finally {
      off();
    }
  });

  it('off() stops listening to both signals', () => {
    const counts = () => [process.listenerCount('SIGINT'), process.listenerCount('SIGTERM')];
    const before = counts();
    const { off } = listen();
    expect(counts()).toEqual(before.map((n) => n + 1));
    off();
    expect(counts()).toEqual(before);
  });
});
