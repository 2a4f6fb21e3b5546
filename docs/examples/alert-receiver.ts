// A whale alert receiver, as docs/protocol.md section 9 describes it: verify the Standard Webhooks signature
// (and the timestamp, within 5 minutes), answer 401 when it does not verify, and act on each alert once. The
// project's tests run this very code (test/e2e/alerts.test.ts).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Webhook } from 'standardwebhooks';

export interface WhaleAlert {
  idempotencyKey: string;
  action: 'whale_alert';
  consumerId: string;
  eventId: string;
  payload: Record<string, unknown>;
}

export function alertReceiver(secret: string, onAlert: (alert: WhaleAlert, webhookId: string) => void) {
  const webhook = new Webhook(secret); // WHALE_ALERT_SIGNING_SECRET (whsec_…)
  const seen = new Set<string>(); // in production: a unique key in your database
  return (req: IncomingMessage, res: ServerResponse): void => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      let alert: WhaleAlert;
      try {
        alert = webhook.verify(body, req.headers as Record<string, string>) as WhaleAlert;
      } catch {
        res.writeHead(401).end();
        return;
      }
      const id = String(req.headers['webhook-id']); // the same on every retry of one alert
      if (!seen.has(id)) onAlert(alert, id);
      seen.add(id);
      res.writeHead(204).end();
    });
  };
}
