#!/usr/bin/env bash
# Connections a hostile or careless client can make ownerguard hold (issue
# 17, target 3), on loopback, bounded in time:
#
#   - IDLE clients (default 10,000) that finish the TLS handshake, send one
#     review (a 3.4 KB Pod CREATE), read the answer and then say nothing,
#     keeping the connection open (examples/abuse.rs); in one phase over
#     HTTP/1.1 (as the API server speaks), in another over HTTP/2 (ALPN h2,
#     which ownerguard offers to any client);
#   - STALLED handshakes (default 1,000): a TCP connection and 11 bytes of a
#     ClientHello, then nothing;
#   - meanwhile a reviewing client (examples/review_load.rs) on 2 HTTP/1.1
#     keep-alive connections at 100 reviews/s, latency counted from when
#     each review was due.
#
# In each phase all of them are held HOLD seconds (default 30) after the
# last one is open, then closed; ownerguard is watched 5 s more. A fresh
# ownerguard (serve --pods examples/pods.yaml) for each phase. Every
# second: its RSS, open file descriptors and threads, and how many
# connections the abuse holds and how many the server has closed. Per
# connection: (RSS when the most were held - RSS before) / that many.
#
#   bash bench/abuse.sh [IDLE] [STALLED] [HOLD] [PHASES]   (10000 1000 30 "http1 h2")
#
# Needs IDLE + STALLED + 200 open files in each process: the soft limit is
# raised to the hard one (the script says when that is not enough).
# Exit 1 on its own errors, 2 when a review went unanswered or wrong.
set -euo pipefail
# shellcheck source=bench/lib.sh disable=SC2153 # OG_* are set by og_start
source "$(dirname "$0")/lib.sh"
idle=${1:-10000}
stalled=${2:-1000}
hold=${3:-30}
phases=${4:-http1 h2}
review_rate=100

raise_nofile $((idle + stalled + 200))
bench_init
bench_build abuse review_load
body="$BENCH_DIR/review-create-3k.json"

# phase PROTOCOL: one round of abuse; prints its tables; sets status=2
# when a review went unanswered or wrong.
phase() {
  local protocol=$1
  local abuse_out="$BENCH_WORK/abuse-$protocol.jsonl"
  local samples="$BENCH_WORK/samples-$protocol.tsv"
  local rss_before fds_before sampler reviewer abuse_done rss_after fds_after summary review
  local most_line most_rss most_held peak_kb max_fds review_seconds og_pid certs
  # A fresh ownerguard for each phase, warmed by a few reviews.
  og_start "abuse-$protocol" "" --pods "$REPO/examples/pods.yaml" || die "ownerguard did not start"
  og_pid=$OG_PID
  wait_ready "$OG_METRICS" 60
  certs="$OG_DIR/certs"
  "$RELEASE/examples/review_load" --addr "$OG_ADDR" --ca "$certs/ca.crt" --body "$body" \
    --connections 4 --seconds 1 >/dev/null 2>>"$BENCH_WORK/client.log" || die "warm-up failed"
  sleep 1
  rss_before=$(proc_kb "$og_pid" VmRSS)
  fds_before=$(fd_count "$og_pid")
  : >"$abuse_out"
  # Sampler: every second, ownerguard's RSS, fds, threads and the abuse's
  # last progress line.
  (
    start=$(date +%s.%N)
    trap 'exit 0' TERM
    while kill -0 "$og_pid" 2>/dev/null; do
      now=$(date +%s.%N)
      last="$(tail -n 1 "$abuse_out" 2>/dev/null || true)"
      [[ "$last" == *'"t":'* ]] || last='{}'
      printf '%s\t%s\t%s\t%s\t%s\n' "$(awk -v a="$start" -v b="$now" 'BEGIN { printf "%.0f", b - a }')" \
        "$(proc_kb "$og_pid" VmRSS)" "$(fd_count "$og_pid")" "$(proc_kb "$og_pid" Threads)" "$last"
      sleep 1
    done
  ) >"$samples" &
  sampler=$!
  BENCH_PIDS+=("$sampler")

  review_seconds=$((hold + 90))
  blog "reviewing client: 2 connections, $review_rate reviews/s, ${review_seconds}s at most"
  "$RELEASE/examples/review_load" --addr "$OG_ADDR" --ca "$certs/ca.crt" --body "$body" \
    --connections 2 --rate "$review_rate" --seconds "$review_seconds" \
    --expect '"allowed":true' --expect '"patch":' >"$BENCH_WORK/review-$protocol.out" 2>"$BENCH_WORK/review-$protocol.log" &
  reviewer=$!
  BENCH_PIDS+=("$reviewer")
  sleep 2
  blog "abuse: $idle idle clients and $stalled stalled handshakes, held ${hold}s once open"
  "$RELEASE/examples/abuse" --addr "$OG_ADDR" --ca "$certs/ca.crt" --body "$body" --protocol "$protocol" \
    --idle "$idle" --stalled "$stalled" --hold "$hold" >"$abuse_out" 2>"$BENCH_WORK/abuse-$protocol.log" ||
    die "abuse client failed: $(tail -n 3 "$BENCH_WORK/abuse-$protocol.log")"
  abuse_done=$(wc -l <"$samples")
  blog "$(grep -a -m1 'opened after' "$BENCH_WORK/abuse-$protocol.log" || echo 'abuse: not all opened')"
  blog "abuse closed its connections; watching ownerguard 5 s more, then stopping the reviewing client"
  sleep 5
  kill -TERM "$reviewer" 2>/dev/null || true
  wait "$reviewer" 2>/dev/null || true
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  rss_after=$(proc_kb "$og_pid" VmRSS)
  fds_after=$(fd_count "$og_pid")
  summary="$(grep '"summary":true' "$abuse_out")" || die "no summary from the abuse client"
  review="$(tail -n 1 "$BENCH_WORK/review-$protocol.out")"
  [[ "$review" == *'"answers"'* ]] || review=""

  echo
  echo "ownerguard serve under connection abuse, idle clients over $protocol: $idle idle clients (handshake, one review, silence),"
  echo "$stalled stalled handshakes, held ${hold}s once open; $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg),"
  echo "ulimit -n $(ulimit -n) (hard $(ulimit -Hn))"
  echo
  echo "| t (s) | ownerguard RSS | fds | threads | idle held | stalled held | closed by the server (idle / stalled) |"
  echo "|---|---|---|---|---|---|---|"
  awk -F'\t' -v every=5 -v done_at="$abuse_done" '
    function field(json, key,   m) { return match(json, "\"" key "\":[0-9]+") ? substr(json, RSTART + length(key) + 3, RLENGTH - length(key) - 3) : "" }
    (NR - 1) % every == 0 || NR == done_at {
      printf "| %s%s | %.1f MiB | %s | %s | %s | %s | %s / %s |\n", $1, (NR == done_at ? " (abuse ends)" : ""), $2 / 1024, $3, $4,
        field($5, "idle_open"), field($5, "stalled_open"), field($5, "idle_closed_by_server"), field($5, "stalled_closed_by_server")
    }' "$samples"
  echo
  peak_kb=$(cut -f2 "$samples" | sort -n | sed -n '$p')
  # The first sample holding the most connections: its RSS over them.
  most_line="$(awk -F'\t' '{ if (match($5, /"idle_open":[0-9]+/)) i = substr($5, RSTART + 12, RLENGTH - 12); else i = 0;
    if (match($5, /"stalled_open":[0-9]+/)) s = substr($5, RSTART + 15, RLENGTH - 15); else s = 0;
    if (i + s > most) { most = i + s; line = $2 "\t" most } } END { print line }' "$samples")"
  most_rss=$(cut -f1 <<<"$most_line")
  most_held=$(cut -f2 <<<"$most_line")
  max_fds=$(cut -f3 "$samples" | sort -n | tail -n 1)
  echo "| figure | value |"
  echo "|---|---|"
  echo "| RSS before / peak / 5 s after the abuse closed | $(mib "$rss_before") / $(mib "$peak_kb") / $(mib "$rss_after") MiB |"
  if [[ "${most_held:-0}" -gt 0 ]]; then
    echo "| memory per held connection, when the most were held | $(awk -v p="$most_rss" -v b="$rss_before" -v n="$most_held" 'BEGIN { printf "%.1f KiB ((%.1f - %.1f MiB) / %d held)", (p - b) / n, p / 1024, b / 1024, n }') |"
  fi
  echo "| open fds before / most / after | $fds_before / $max_fds / $fds_after |"
  jq -r '"| idle clients: opened / failed to open / closed by the server | \(.idle - .idle_failed) / \(.idle_failed) / \(.idle_closed_by_server)\(if .idle_close_after then " (after p50 \(.idle_close_after.p50_s) s, max \(.idle_close_after.max_s) s)" else "" end) |",
          "| stalled handshakes: opened / failed / closed by the server | \(.stalled - .stalled_failed) / \(.stalled_failed) / \(.stalled_closed_by_server)\(if .stalled_close_after then " (after p50 \(.stalled_close_after.p50_s) s, max \(.stalled_close_after.max_s) s)" else "" end) |"' <<<"$summary"
  if [[ -n "$review" ]]; then
    jq -r '"| reviewing client, \(.seconds) s at '"$review_rate"'/s: answers / errors / late (over 5 s) | \(.answers) / \(.errors) / \(.late) |",
            "| its latency p50 / p99 / max | \(.p50_ms * 100 | round / 100) / \(.p99_ms * 100 | round / 100) / \(.max_ms * 100 | round / 100) ms |"' <<<"$review"
  else
    echo "| reviewing client | no result: $(tail -n 2 "$BENCH_WORK/review-$protocol.log" | tr '\n' ' ') |"
  fi
  grep -a -m1 'first idle failure' "$BENCH_WORK/abuse-$protocol.log" || true
  grep -a -m1 'first stalled failure' "$BENCH_WORK/abuse-$protocol.log" || true
  grep -a 'review_load: error' "$BENCH_WORK/review-$protocol.log" | head -n 3 || true
  if [[ -z "$review" || "$(jq .errors <<<"$review")" != 0 ]]; then
    echo "reviews went unanswered or wrong"
    status=2
  fi
  stop_pid "$og_pid"
}

status=0
for protocol in $phases; do
  phase "$protocol"
done
exit "$status"
