// The Node flags the worker process is started with (package.json's `worker` script, the Dockerfile's CMD, the main
// job's NODE_OPTIONS in scripts/start.sh, the benches and the tests that start it as operators do;
// test/unit/worker-launch.test.ts holds the first three to this list).
//
// --max-semi-space-size=16: the young generation's two halves at most 16 MiB each, as Node 20 and 22 have them.
// Node 24's V8 lets them grow to 64 MiB each, and a replay's allocation rate grows them there within seconds of the
// start: the worker then holds about 100 MiB more at idle (339 against 228 MiB), its peak over a million-event
// replay is 404 MiB against 299, and its CPU per event is the same (bench/results, the paragraph dated late on
// 6 December 2026 in docs/performance.md). Only a launch flag sets it: V8 sizes the young generation when the
// process starts.
export const WORKER_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=16'];
