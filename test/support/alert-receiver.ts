// A webhook receiver for the alert tests: the documented example (docs/examples/alert-receiver.ts) verifies and
// dedupes, while this records every delivery as it arrived, notices two deliveries of one key in flight at once,
// and answers as a test says (a status after a delay, or never).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { alertReceiver, type WhaleAlert } from '../../docs/examples/alert-receiver.js';

export interface Delivery {
  id: string;
  key: string | undefined;
  /** The status answered; 0: the connection closed unanswered (the sender gave up, or died). */
  status: number;
}

/** How to answer the nth delivery of webhook-id `id`: a status (default: verify and 204), after a delay, or never. */
export type Answer = (id: string, nth: number) => { delayMs?: number; status?: number } | 'hang';

export interface AlertReceiver {
  /** With a path and query that carry a secret, as webhook URLs often do. */
  url: string;
  /** The webhook-id of every call as it arrived (answered or not yet). */
  arrivals: string[];
  /** Every call once its connection closed, with what it was answered. */
  deliveries: Delivery[];
  /** What the documented receiver accepted: each alert once, signature verified. */
  alerts: { alert: WhaleAlert; id: string }[];
  overlaps: string[];
  answer: Answer;
  close(): Promise<void>;
}

export async function startAlertReceiver(secret: string, answer: Answer = () => ({})): Promise<AlertReceiver> {
  const hanging: ServerResponse[] = [];
  const inFlight = new Set<string>();
  const receiver: Omit<AlertReceiver, 'url' | 'close'> = {
    arrivals: [],
    deliveries: [],
    alerts: [],
    overlaps: [],
    answer,
  };
  const verify = alertReceiver(secret, (alert, id) => receiver.alerts.push({ alert, id }));
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const id = String(req.headers['webhook-id']);
    // In flight until its connection closes: answered, or given up by the dispatcher at its timeout.
    receiver.arrivals.push(id);
    if (inFlight.has(id)) receiver.overlaps.push(id);
    inFlight.add(id);
    res.on('close', () => {
      inFlight.delete(id);
      const key = req.headers['idempotency-key'] as string | undefined;
      receiver.deliveries.push({ id, key, status: res.writableFinished ? res.statusCode : 0 });
    });
    const decision = receiver.answer(id, receiver.arrivals.filter((a) => a === id).length);
    if (decision === 'hang') {
      hanging.push(res);
      req.resume();
      return;
    }
    setTimeout(() => {
      if (res.destroyed) return;
      if (decision.status === undefined) verify(req, res);
      else req.resume().on('end', () => res.writeHead(decision.status!).end());
    }, decision.delayMs ?? 0);
  });
  await new Promise<void>((resolveListen) => server.listen(0, '127.0.0.1', resolveListen));
  const port = (server.address() as AddressInfo).port;
  return Object.assign(receiver, {
    url: `http://127.0.0.1:${port}/hooks/s3cr3t-path?token=s3cr3t-query`,
    close: async () => {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolveClose) => server.close(() => resolveClose()));
    },
  });
}
