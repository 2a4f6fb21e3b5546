#!/bin/sh
# One-shot `temporal-namespace` service (temporalio/admin-tools): waits for the frontend, registers the
# namespace and the search attributes the consumer workflow upserts. Idempotent: what exists is kept.
#   TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, WHALEHUNT_SEARCH_ATTRIBUTES ("Name=Type Name=Type", the
#   SEARCH_ATTRIBUTES of workflows/definitions.ts; a unit test keeps the two equal).
# Outside the image, TEMPORAL_CLI names the `temporal` binary; its TLS comes from its own TEMPORAL_TLS_* variables
# (or a TEMPORAL_CONFIG_FILE profile), the ones the worker reads.
set -eu
: "${TEMPORAL_ADDRESS:?TEMPORAL_ADDRESS is required}"
: "${WHALEHUNT_SEARCH_ATTRIBUTES:?WHALEHUNT_SEARCH_ATTRIBUTES is required}"
namespace=${TEMPORAL_NAMESPACE:-default}
attempts=${SETUP_ATTEMPTS:-60}
pause=${SETUP_RETRY_SECONDS:-2}
temporal=${TEMPORAL_CLI:-temporal}

# Runs "$@" until it succeeds, at most $attempts times: the frontend and a new namespace take a while to serve.
retry() {
  n=1
  until "$@"; do
    if [ "$n" -ge "$attempts" ]; then
      echo "gave up after $attempts attempts: $*" >&2
      return 1
    fi
    n=$((n + 1))
    sleep "$pause"
  done
}

retry "$temporal" operator cluster health --address "$TEMPORAL_ADDRESS" >/dev/null
echo "Temporal at $TEMPORAL_ADDRESS is serving"
"$temporal" operator cluster system --address "$TEMPORAL_ADDRESS"

if "$temporal" operator namespace describe --address "$TEMPORAL_ADDRESS" --namespace "$namespace" >/dev/null 2>&1; then
  echo "namespace $namespace already registered"
else
  retry "$temporal" operator namespace create --address "$TEMPORAL_ADDRESS" --namespace "$namespace"
  echo "namespace $namespace registered"
fi

list_attributes() {
  "$temporal" operator search-attribute list --address "$TEMPORAL_ADDRESS" --namespace "$namespace"
}
for spec in $WHALEHUNT_SEARCH_ATTRIBUTES; do
  name=${spec%%=*}
  type=${spec#*=}
  existing=$(retry list_attributes)
  if printf '%s\n' "$existing" | grep -qw -- "$name"; then
    echo "search attribute $name already registered"
  else
    retry "$temporal" operator search-attribute create --address "$TEMPORAL_ADDRESS" --namespace "$namespace" \
      --name "$name" --type "$type"
    echo "search attribute $name ($type) registered"
  fi
done
