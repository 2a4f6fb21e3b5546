#!/usr/bin/env bash
# Prints where the Temporal server of docker-compose.yml (temporalio/server and admin-tools 1.31.2) is on
# this machine, as shell assignments on stdout (everything else goes to stderr):
#   TEMPORAL_SERVER=/…/temporal-server        the server binary the temporalio/server image runs
#   TEMPORAL_SQL_TOOL=/…/temporal-sql-tool    the schema tool the admin-tools image runs
#   TEMPORAL_SCHEMA_DIR=/…/postgresql/v12     the schema files the admin-tools image ships
# Each comes from its variable if set, else the per-user cache, else a one-time `go install` of the
# go.temporal.io/server module into that cache (several minutes). The cache lives outside the repository
# so fresh clones (CI) reuse the build, as scripts/ensure-temporal-cli.sh does for the CLI.
set -euo pipefail

version=v1.31.2
module=go.temporal.io/server

log() { printf 'ensure-temporal-server: %s\n' "$*" >&2; }

cache_dir="${XDG_CACHE_HOME:-$HOME/.cache}/whalehunt-consumer/bin"
server="${TEMPORAL_SERVER:-$cache_dir/temporal-server}"
sql_tool="${TEMPORAL_SQL_TOOL:-$cache_dir/temporal-sql-tool}"
schema_dir="${TEMPORAL_SCHEMA_DIR:-$cache_dir/temporal-schema-$version/postgresql/v12}"

ready() { [[ -x "$server" && ! -d "$server" && -x "$sql_tool" && ! -d "$sql_tool" && -d "$schema_dir/temporal/versioned" ]]; }

report() {
  printf 'TEMPORAL_SERVER=%s\nTEMPORAL_SQL_TOOL=%s\nTEMPORAL_SCHEMA_DIR=%s\n' "$server" "$sql_tool" "$schema_dir"
  exit 0
}

if ready; then report; fi

for name in TEMPORAL_SERVER TEMPORAL_SQL_TOOL TEMPORAL_SCHEMA_DIR; do
  if [[ -n "${!name:-}" ]]; then
    log "$name=${!name} is set but not usable (executable files and a schema dir holding temporal/versioned are needed)"
    exit 1
  fi
done

if ! command -v go >/dev/null 2>&1; then
  log "no Temporal server in $cache_dir and Go is not installed to build one. Either:"
  log "  - install Go (https://go.dev/dl/) and rerun this script; it builds $module@$version once into $cache_dir"
  log "  - set TEMPORAL_SERVER, TEMPORAL_SQL_TOOL and TEMPORAL_SCHEMA_DIR to an existing $version installation"
  log "  - no local server at all: 'docker compose up' runs it in containers (see README.md)"
  exit 1
fi

mkdir -p "$cache_dir"
# Serialise concurrent first runs so the build happens once.
exec 9>"$cache_dir/.server-build.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi
if ready; then report; fi

build_dir="$(mktemp -d "$cache_dir/.server-build.XXXXXX")"
trap 'rm -rf "$build_dir"' EXIT
log "building $module $version (server and SQL tool) with Go into $cache_dir (one time, takes several minutes)"
# `go install` names the binaries after their package directories: cmd/server → server, cmd/tools/sql → sql.
if ! GOBIN="$build_dir" go install "$module/cmd/server@$version" "$module/cmd/tools/sql@$version" >&2; then
  log "go install of $module@$version failed (see above); it declares its Go version in its go.mod"
  exit 1
fi
module_dir="$(go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
if [[ ! -d "$module_dir/schema/postgresql/v12" ]]; then
  log "the module download has no schema/postgresql/v12 (looked in '$module_dir')"
  exit 1
fi
# The module cache is read-only and may be cleaned; the schema is copied next to the binaries it belongs to.
mkdir -p "$build_dir/schema"
cp -R "$module_dir/schema/postgresql" "$build_dir/schema/"
chmod -R u+w "$build_dir/schema"
rm -rf "$cache_dir/temporal-schema-$version"
mv "$build_dir/schema" "$cache_dir/temporal-schema-$version"
mv "$build_dir/sql" "$cache_dir/temporal-sql-tool"
mv "$build_dir/server" "$cache_dir/temporal-server"
log "built $cache_dir/temporal-server, $cache_dir/temporal-sql-tool and $cache_dir/temporal-schema-$version"
report
