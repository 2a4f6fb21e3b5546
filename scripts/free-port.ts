// A TCP port free on 127.0.0.1 right now (the OS picks it), for servers the tests and scripts start themselves.
import { createServer } from 'node:net';

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolveListen, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolveListen);
  });
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolveClose) => server.close(() => resolveClose()));
  return port;
}
