#!/usr/bin/env bash
# A connection flood against ownerguard's cap, on
# loopback, bounded in time: FLOOD connections (default 11,000) that send
# half a TLS handshake or finish it and then say nothing, reopened as the
# server sheds them, from one source address and then from many
# (127.1.x.y, each its own source to the server); meanwhile the reviews an
# API server sends: FRESH_RATE a second (default 100) each on a new
# connection, and 100 a second on 2 keep-alive connections
# (examples/flood.rs). ownerguard runs with the chart's defaults
# (--max-connections 1000, a quarter of them per source).
#
#   bash bench/flood.sh [FLOOD] [SECONDS] [SOURCES...]      (11000 30 "1 64 1024")
#
# Prints, per phase, the reviews answered and failed of each kind, their
# latency, what the flood opened and the server shed, and ownerguard's
# peak RSS. Exit 2 when a review failed.
set -euo pipefail
# shellcheck source=bench/lib.sh disable=SC2153 # OG_* are set by og_start
source "$(dirname "$0")/lib.sh"
flood=${1:-11000}
seconds=${2:-30}
shift 2 || true
sources=("$@")
[[ ${#sources[@]} -gt 0 ]] || sources=(1 64 1024)

raise_nofile $((flood + 2000))
bench_init
bench_build flood
body="$BENCH_DIR/review-create-3k.json"
status=0
echo "| flood sources | fresh reviews answered / failed | fresh p50 / p99 | kept-alive answered / failed | kept p99 | flood opened / shed by the server | ownerguard peak RSS |"
echo "|---|---|---|---|---|---|---|"
for n in "${sources[@]}"; do
  og_start "flood-$n" "" --pods "$REPO/examples/pods.yaml" || die "ownerguard did not start"
  og_pid=$OG_PID
  wait_ready "$OG_METRICS" 60
  out="$BENCH_WORK/flood-$n.jsonl"
  peak=0
  (
    while kill -0 "$og_pid" 2>/dev/null; do proc_kb "$og_pid" VmRSS; sleep 1; done
  ) >"$BENCH_WORK/rss-$n" &
  sampler=$!
  BENCH_PIDS+=("$sampler")
  blog "flood of $flood connections from $n source(s) for ${seconds}s"
  "$RELEASE/examples/flood" --addr "$OG_ADDR" --ca "$OG_DIR/certs/ca.crt" --body "$body" \
    --sources "$n" --flood "$flood" --seconds "$seconds" >"$out" 2>"$BENCH_WORK/flood-$n.log" ||
    die "flood client failed: $(tail -n 3 "$BENCH_WORK/flood-$n.log")"
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  peak=$(sort -n "$BENCH_WORK/rss-$n" | tail -n 1)
  summary="$(grep '"summary":true' "$out")"
  jq -r --arg peak "$(mib "$peak") MiB" --arg n "$n" '"| \($n) | \(.fresh.answered) / \(.fresh.failed) | \(.fresh.latency.p50_ms // 0 | . * 10 | round / 10) / \(.fresh.latency.p99_ms // 0 | . * 10 | round / 10) ms | \(.kept.answered) / \(.kept.failed) | \(.kept.latency.p99_ms // 0 | . * 10 | round / 10) ms | \(.flood_opened) / \(.flood_closed_by_server) | \($peak) |"' <<<"$summary"
  if [[ "$(jq '.fresh.failed + .kept.failed' <<<"$summary")" != 0 ]]; then
    jq -r '"failed: fresh \(.fresh.first_error), kept \(.kept.first_error)"' <<<"$summary"
    status=2
  fi
  stop_pid "$og_pid"
done
exit "$status"
