#!/bin/sh
# One-shot `consumer-start` service (the worker image): starts the consumer workflow through the CLI. It runs
# on every `up`, so a consumer that is already running counts as success; any other failure keeps the
# CLI's exit code.
#   WHALEHUNT_CONSUMER_ID (default main), WHALEHUNT_INITIAL_START (live_cut or from_floor; default live_cut),
#   WHALEHUNT_FILTER (the filter as JSON; default {}, everything). The last two matter on the first start only.
set -u
default_filter='{}'
output=$(node dist/cli/main.js start --consumer "${WHALEHUNT_CONSUMER_ID:-main}" \
  --start "${WHALEHUNT_INITIAL_START:-live_cut}" --filter "${WHALEHUNT_FILTER:-$default_filter}" 2>&1)
status=$?
printf '%s\n' "$output"
if [ "$status" -ne 0 ] && printf '%s\n' "$output" | grep -q '^error (already_running):'; then
  echo "consumer ${WHALEHUNT_CONSUMER_ID:-main} is already running; nothing to start"
  exit 0
fi
exit "$status"
