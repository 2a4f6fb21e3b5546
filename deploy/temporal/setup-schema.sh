#!/bin/sh
# One-shot `temporal-schema` service (temporalio/admin-tools): creates Temporal's two databases on the
# stack's Postgres and brings their schemas to the version the admin-tools image ships. Every step is
# idempotent (an existing database is kept, applied schema versions are skipped), so it runs on every `up`
# and upgrades the schema after the image tags are bumped. Outside the image (the topology tests,
# scripts/ensure-temporal-server.sh) TEMPORAL_SQL_TOOL and TEMPORAL_SCHEMA_DIR say where the tool and the
# schema files are; DBNAME and VISIBILITY_DBNAME are the server's own settings (deploy/temporal/server.env).
set -eu
: "${POSTGRES_SEEDS:?POSTGRES_SEEDS is required}"
: "${POSTGRES_USER:?POSTGRES_USER is required}"
: "${SQL_PASSWORD:?SQL_PASSWORD is required}"
sql_tool=${TEMPORAL_SQL_TOOL:-temporal-sql-tool}
schema_root=${TEMPORAL_SCHEMA_DIR:-/etc/temporal/schema/postgresql/v12}

for schema in temporal visibility; do
  if [ ! -d "$schema_root/$schema/versioned" ]; then
    echo "no Temporal schema at $schema_root/$schema/versioned: set TEMPORAL_SCHEMA_DIR to the schema/postgresql/v12" \
      "directory of the server release (/etc/temporal/schema/postgresql/v12 in temporalio/admin-tools)" >&2
    exit 1
  fi
done

for pair in "${DBNAME:-temporal}:temporal" "${VISIBILITY_DBNAME:-temporal_visibility}:visibility"; do
  database=${pair%%:*}
  schema=${pair#*:}
  echo "database $database: create, setup-schema, update-schema ($schema from $schema_root/$schema/versioned)"
  set -- --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "${DB_PORT:-5432}" -u "$POSTGRES_USER" --db "$database"
  "$sql_tool" "$@" create-database
  "$sql_tool" "$@" setup-schema -v 0.0
  "$sql_tool" "$@" update-schema -d "$schema_root/$schema/versioned"
done
echo "Temporal schemas are up to date"
