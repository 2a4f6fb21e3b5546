// `worker --help`: what the process reads from its environment. Printed before configuration is read, so it
// works with nothing set.
import { DEFAULT_SESSION_BOUNDS } from '../db/session-settings.js';
import { DEFAULT_HEAP_GROWTH_PERCENT } from './config.js';

const { lockTimeoutMs, statementTimeoutMs, idleInTransactionTimeoutMs } = DEFAULT_SESSION_BOUNDS;

export const WORKER_HELP = `whalehunt worker: runs the consumer workflows and activities (and the outbox dispatcher)

Usage: npm run worker [-- --help]

Configuration is read from the environment once, at start-up:
  DATABASE_URL               postgres:// connection URL (required)
  DATABASE_POOL_SIZE         Postgres connections this process opens at most (default 10)
  DB_LOCK_TIMEOUT_MS, DB_STATEMENT_TIMEOUT_MS, DB_IDLE_IN_TRANSACTION_TIMEOUT_MS
                             Postgres bounds of every pooled session (default ${lockTimeoutMs}, ${statementTimeoutMs}, ${idleInTransactionTimeoutMs})
  WHALEHUNT_URL              stream WebSocket URL, ws:// or wss:// (required)
  WHALEHUNT_API_KEY          stream API key (required; never logged)
  TASK_QUEUE                 task queue the worker polls (default whalehunt-consumer)
  MAX_CONCURRENT_ACTIVITIES  activity slots: consumers this worker streams at once (default 100)
  HEAP_GROWTH_PERCENT        how far the heap grows past its live size between full collections (default ${DEFAULT_HEAP_GROWTH_PERCENT},
                             10-300; off: V8's own, up to about 4x: about a tenth less CPU, far more memory)

Temporal, read as the \`temporal\` CLI reads it (variables over the profile, over the defaults):
  TEMPORAL_ADDRESS           Temporal frontend host:port (default 127.0.0.1:7233)
  TEMPORAL_NAMESPACE         Temporal namespace (default default)
  TEMPORAL_API_KEY           API key, e.g. for Temporal Cloud; implies TLS (never logged)
  TEMPORAL_TLS               true: TLS with the system's CAs
  TEMPORAL_TLS_SERVER_CA_CERT_PATH, TEMPORAL_TLS_SERVER_CA_CERT_DATA
                             a private CA for the server's certificate (file, or the PEM inline)
  TEMPORAL_TLS_CLIENT_CERT_PATH, TEMPORAL_TLS_CLIENT_CERT_DATA, TEMPORAL_TLS_CLIENT_KEY_PATH,
  TEMPORAL_TLS_CLIENT_KEY_DATA
                             client certificate and key for mutual TLS (both or neither)
  TEMPORAL_TLS_SERVER_NAME   the name the server's certificate holds, when not the address's host
  TEMPORAL_PROFILE           profile of the profile file to read (default default)
  TEMPORAL_CONFIG_FILE       the profile file (default ~/.config/temporalio/temporal.toml)
  TEMPORAL_GRPC_META_<NAME>  a gRPC header sent with every call

Stream and processing:
  LEASE_MS, HEARTBEAT_MS, CONNECT_TIMEOUT_MS, RECONNECT_MAX_ATTEMPTS, RECONNECT_INITIAL_MS, RECONNECT_MAX_MS
                             streaming lease, heartbeat and reconnect tuning (milliseconds, counts)
  MAX_FRAME_BYTES, STAGING_MAX_EVENTS, STAGING_MAX_BYTES, STAGING_MAX_AGE_MS
                             frame and staging bounds
  QUARANTINE_TERMINAL_REASONS  comma-separated quarantine reasons released without a decision
  WHALE_ALERT_MIN_NOTIONAL   notional (USD) at or above which a live trade raises a whale alert (unset: none)
  WHALE_ALERT_WEBHOOK_URL    where the outbox dispatcher POSTs whale alerts (unset: no dispatcher); only its
                             origin is ever logged
  WHALE_ALERT_SIGNING_SECRET Standard Webhooks secret, whsec_ + base64 of 24-64 bytes (required with the URL;
                             never logged); WHALE_ALERT_SIGNING_SECRET_PREVIOUS also signs during a rotation
  WHALE_ALERT_MAX_AGE        a live event observed longer ago raises none (default 5m; 0: no bound)
  WHALE_ALERT_ON_REPLAY      true: replayed and backfilled whales alert too (default false)
  WHALE_ALERT_CONCURRENCY    POSTs in flight per worker (default 8)
  WHALE_ALERT_TIMEOUT        how long one POST may take (default 10s; a claim's lease is three of them)
  PAGE_STREAM, PAGE_LIMIT, PAGE_CHUNK_SIZE
                             paginated history source: stream, events per page, events per transaction
  LOG_LEVEL                  TRACE, DEBUG, INFO (default), WARN or ERROR
  LOG_FORMAT                 json (default, one object per line) or pretty
  METRICS_PORT               serve /metrics, /healthz and /readyz on this port (unset: off; 0: a free port)
  METRICS_HOST               address the endpoint binds (default 0.0.0.0)
  WORKFLOW_BUNDLE_PATH       a prebuilt workflow bundle (default: bundle workflows/index.ts at start)

Maintenance (retention):
  MAINTENANCE_EVERY          the maintenance Schedule created at start if missing (default 1h; e.g. 30m, 1d;
                             off: none); an existing schedule is left as it is
  OUTBOX_RETENTION_DAYS      finished whale alerts are removed after this many days (default 30; off: kept)
  REVISION_RETENTION_DAYS    superseded execution revisions are removed after this many days (default off: kept)

SIGINT/SIGTERM shut down gracefully: leases stop at their next checkpoint boundary.
Exit codes: 0 stopped, 1 failed, 2 invalid configuration, 130 a second signal (exit without draining) or a
signal before the worker started.
`;
