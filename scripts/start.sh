#!/usr/bin/env bash
# `npm start`: dependencies, the Temporal CLI, then the main job (cli/main.ts run), which starts the local
# services it needs (worker/dev-stack.ts) unless DATABASE_URL / TEMPORAL_ADDRESS point elsewhere. It runs the
# sources through tsx, not dist/: this is the development stack, where an edit takes effect at the next start
# without a build, and a few seconds of compiling are nothing to a job that runs for hours. It still builds dist/
# (when stale) first: the commands a waiting consumer shows in Current Details run the compiled CLI.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/ensure-deps.sh
if [[ -z "${TEMPORAL_ADDRESS:-}" ]]; then
  TEMPORAL_CLI="$(bash scripts/ensure-temporal-cli.sh)"
  export TEMPORAL_CLI
fi
npm run --silent build -- --if-stale
# The worker's launch flags (worker/node-flags.ts): this job runs its worker in process, and tsx runs the job in a
# node of its own, which a flag on this command line would not reach; NODE_OPTIONS does.
export NODE_OPTIONS="${NODE_OPTIONS:+$NODE_OPTIONS }--max-semi-space-size=16"
exec npx tsx cli/main.ts run "$@"
