#!/usr/bin/env bash
# `npm test`: typecheck, lint, the migrations check, the build (dist/, only when it is not a build of the current
# sources already: e2e tests run the compiled CLI and worker as operators do), then every vitest project (unit, db,
# e2e, topology: the Temporal server release, built once by scripts/ensure-temporal-server.sh). Extra arguments go
# to vitest (e.g. `npm test -- --project unit`). Without DATABASE_URL and without a Postgres at 127.0.0.1:5432, the
# tests run against the embedded Postgres (scripts/with-postgres.ts).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/ensure-deps.sh
TEMPORAL_CLI="$(bash scripts/ensure-temporal-cli.sh)"
export TEMPORAL_CLI
# Assigned first: a failed build stops the script (an eval of a failed substitution would not).
temporal_server="$(bash scripts/ensure-temporal-server.sh)"
eval "$temporal_server"
export TEMPORAL_SERVER TEMPORAL_SQL_TOOL TEMPORAL_SCHEMA_DIR
npm run --silent typecheck
npm run --silent lint
npm run --silent db:check
npm run --silent build -- --if-stale
exec npx tsx scripts/with-postgres.ts npx vitest run "$@"
