// `npm start` prints two Prometheus URLs: the worker's (the consumer's metrics) and, in the dev server's banner,
// the Temporal server's own. Each says whose it is.
import { describe, expect, it } from 'vitest';
import { devServerLine } from '../../worker/local-services.js';

describe("the dev server's output as the main job prints it", () => {
  it("labels the banner's metrics URL as the Temporal server's own, and passes other lines on as they are", () => {
    // The banner of `temporal server start-dev` (CLI 1.5.1).
    const banner = [
      'CLI 1.5.1 (Server 1.29.1, UI 2.42.1)',
      '',
      'Server:  localhost:7233',
      'UI:      http://localhost:8233',
      'Metrics: http://localhost:33883/metrics',
    ];
    expect(banner.map(devServerLine)).toEqual([
      '[temporal] CLI 1.5.1 (Server 1.29.1, UI 2.42.1)',
      '[temporal] ',
      '[temporal] Server:  localhost:7233',
      '[temporal] UI:      http://localhost:8233',
      "[temporal] the dev server's own metrics (Temporal server internals): http://localhost:33883/metrics",
    ]);
  });
});
