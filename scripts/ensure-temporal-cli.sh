#!/usr/bin/env bash
# Prints the absolute path of a Temporal CLI binary on stdout; everything else goes to stderr.
# Lookup order: $TEMPORAL_CLI, `temporal` on PATH, the per-user cache, then a one-time `go install`
# into that cache. The cache lives outside the repository so fresh clones (CI) reuse the binary.
set -euo pipefail

log() { printf 'ensure-temporal-cli: %s\n' "$*" >&2; }

absolute() { (cd "$(dirname "$1")" && printf '%s/%s\n' "$(pwd -P)" "$(basename "$1")"); }

if [[ -n "${TEMPORAL_CLI:-}" ]]; then
  if [[ -x "$TEMPORAL_CLI" && ! -d "$TEMPORAL_CLI" ]]; then
    absolute "$TEMPORAL_CLI"
    exit 0
  fi
  log "TEMPORAL_CLI=$TEMPORAL_CLI is not an executable file"
  exit 1
fi

if on_path="$(command -v temporal 2>/dev/null)" && [[ -n "$on_path" && -x "$on_path" ]]; then
  absolute "$on_path"
  exit 0
fi

cache_dir="${XDG_CACHE_HOME:-$HOME/.cache}/whalehunt-consumer/bin"
cached="$cache_dir/temporal"
if [[ -x "$cached" ]]; then
  absolute "$cached"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  log "no Temporal CLI found and Go is not installed to build one. Any of these works:"
  log "  - a package manager: brew install temporal (macOS/Linux)"
  log "  - the official download: https://temporal.download/cli/archive/latest?platform=linux&arch=amd64"
  log "    (or see https://docs.temporal.io/cli#install), then put 'temporal' on PATH or set TEMPORAL_CLI=/path/to/temporal"
  log "  - install Go (https://go.dev/dl/) and rerun this script; it builds the CLI once into $cache_dir"
  log "  - no local binary at all: 'docker compose up' runs Temporal in containers (see README.md)"
  exit 1
fi

mkdir -p "$cache_dir"
# Serialise concurrent first runs (e.g. `npm start` and `npm test` at once) so the build happens once.
exec 9>"$cache_dir/.build.lock"
if command -v flock >/dev/null 2>&1; then
  flock 9
fi
if [[ -x "$cached" ]]; then
  absolute "$cached"
  exit 0
fi

# Releases after 1.5.1 carry replace directives that `go install` refuses; try the newest that builds.
for version in v1.5.1 v1.5.0 v1.4.1; do
  log "building the Temporal CLI $version with Go into $cache_dir (one time, takes a few minutes)"
  if GOBIN="$cache_dir" go install "github.com/temporalio/cli/cmd/temporal@$version" >&2; then
    if [[ -x "$cached" ]]; then
      log "built $cached"
      printf '%s\n' "$cached"
      exit 0
    fi
  fi
  log "go install of $version failed"
done

log "could not build the Temporal CLI; install it another way (brew install temporal, the official download"
log "at https://docs.temporal.io/cli#install, or 'docker compose up') and set TEMPORAL_CLI if it is not on PATH"
exit 1
