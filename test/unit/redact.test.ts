import { describe, expect, it } from 'vitest';
import { REDACTED, redactSecret } from '../../protocol/redact.js';

describe('redactSecret', () => {
  it('replaces every occurrence of the secret', () => {
    expect(redactSecret('key k3y-abc failed; retried with k3y-abc', 'k3y-abc')).toBe(
      `key ${REDACTED} failed; retried with ${REDACTED}`,
    );
  });

  it('leaves text without the secret, and any text for an empty secret, unchanged', () => {
    expect(redactSecret('nothing secret here', 'k3y-abc')).toBe('nothing secret here');
    expect(redactSecret('nothing secret here', '')).toBe('nothing secret here');
  });
});
