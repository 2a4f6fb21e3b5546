#!/bin/sh
# One-shot `temporal-schema` service (temporalio/admin-tools): creates Temporal's two databases on the
# stack's Postgres and brings their schemas to the version the admin-tools image ships. Every step is
# idempotent (an existing database is kept, applied schema versions are skipped), so it runs on every `up`
# and upgrades the schema after the image tags are bumped.
set -eu
: "${POSTGRES_SEEDS:?POSTGRES_SEEDS is required}"
: "${POSTGRES_USER:?POSTGRES_USER is required}"
: "${SQL_PASSWORD:?SQL_PASSWORD is required}"

schema_root=/etc/temporal/schema/postgresql/v12
for pair in temporal:temporal temporal_visibility:visibility; do
  database=${pair%%:*}
  schema=${pair#*:}
  echo "database $database: create, setup-schema, update-schema ($schema)"
  set -- --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "${DB_PORT:-5432}" -u "$POSTGRES_USER" --db "$database"
  temporal-sql-tool "$@" create-database
  temporal-sql-tool "$@" setup-schema -v 0.0
  temporal-sql-tool "$@" update-schema -d "$schema_root/$schema/versioned"
done
echo "Temporal schemas are up to date"
