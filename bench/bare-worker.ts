// The memory anchor: a bare Temporal TypeScript worker, nothing of the consumer in it, polling TASK_QUEUE on
// TEMPORAL_ADDRESS with the prebuilt bundle of bench/bare-workflows.ts (WORKFLOW_BUNDLE_PATH), as ours loads its
// own. The memory bench runs it compiled, as it runs our worker compiled, and reads its idle resident set. Logs the
// line our worker logs when it runs; the SDK's default signal handling drains it on SIGTERM.
import { NativeConnection, Worker } from '@temporalio/worker';

const connection = await NativeConnection.connect({ address: process.env.TEMPORAL_ADDRESS! });
const worker = await Worker.create({
  connection,
  namespace: process.env.TEMPORAL_NAMESPACE!,
  taskQueue: process.env.TASK_QUEUE!,
  workflowBundle: { codePath: process.env.WORKFLOW_BUNDLE_PATH! },
});
process.stdout.write(`${JSON.stringify({ msg: 'worker running' })}\n`);
await worker.run();
await connection.close();
