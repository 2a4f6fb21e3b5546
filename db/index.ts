// The database room's public API: what the streaming activity, the workflow's activities and the CLI use.
export { acceptsConnections, createPool } from './connect.js';
export { migrate, MIGRATIONS_FOLDER } from './migrate.js';
export { acquireLease, loadCommitted, type LeaseAttempt, type LeaseRequest } from './state.js';
export { commitCheckpoint, commitCheckpoints, describeFenced } from './commit.js';
export type { CheckpointFence, CheckpointFenced, CheckpointOutcome, CommitResult } from './commit-types.js';
export {
  recordGapDecision,
  recordBindingDecision,
  resolveQuarantine,
  listQuarantine,
  type DecisionInput,
  type QuarantineRecord,
} from './decisions.js';
export {
  loadPageEventsApplied,
  loadPageProgress,
  openPageProgress,
  recognisePageEvents,
  commitPageChunk,
  swapPageCursor,
  type PageProgress,
  type OpenPageProgress,
  type Recognition,
  type PageChunk,
  type ChunkCounts,
  type ChunkResult,
  type CursorSwap,
} from './pages.js';
export { consumerSummary, type ConsumerSummary, type DecisionSummary } from './summary.js';
export {
  claimOutbox,
  completeOutbox,
  dropOutbox,
  failOutbox,
  listenForDueOutbox,
  listOutbox,
  releaseOutbox,
  retryOutbox,
  summarizeOutbox,
  DEFAULT_MAX_OUTBOX_ATTEMPTS,
  OUTBOX_CHANNEL,
  OUTBOX_STATES,
  type OutboxClaim,
  type OutboxItem,
  type OutboxListener,
  type OutboxRow,
  type OutboxSelection,
  type OutboxState,
  type OutboxSummary,
} from './outbox.js';
export { RecentExecutions, RecentExecutionsBudget } from './recent-executions.js';
export { SQLSTATE } from './transaction.js';
export * from './errors.js';
export {
  recordRetentionFloor,
  runMaintenance,
  lastMaintenanceRun,
  tableSizes,
  CONSUMER_TABLES,
  DEFAULT_RETENTION_POLICY,
  type ConsumerPruning,
  type MaintenanceProgress,
  type MaintenanceReport,
  type MaintenanceRunRow,
  type RetentionPolicy,
  type TableSize,
} from './retention.js';
