// Removing a secret (the API key) from text that leaves the process: failure messages, CLI output, log lines.

export const REDACTED = '[REDACTED]';

/** `text` with every occurrence of `secret` replaced by REDACTED; an empty secret redacts nothing. */
export function redactSecret(text: string, secret: string): string {
  return secret.length > 0 ? text.split(secret).join(REDACTED) : text;
}
