#!/usr/bin/env bash
# The soak: `ownerguard serve` in cluster mode for
# MINUTES (default 10) under a steady HTTP/1.1 review load, its serving
# certificate rotated every minute as kubelet rotates a Secret volume, the
# owners the reviews name churning in the loopback test API server, and its
# RSS sampled every second (examples/soak.rs says exactly what and how it
# judges). Prints a row a minute, then the figures: answers, errors, late
# answers (over the chart's 5 s timeoutSeconds), RSS drift.
#
#   bash bench/soak.sh [MINUTES] [PODS] [RATE]      (10 150000 200)
#
# Why cluster mode: with --pods the inventory is read once and never
# changes, so nothing in it could churn; against the test API server the
# owners are deleted and created for real and reach ownerguard through its
# watch (or, when a review outruns the watch, its live GET).
#
# The per-second samples are kept in ${SOAK_SAMPLES:-target/soak-samples.tsv}.
# Loopback only; bounded: MINUTES plus the start-up (the list of PODS).
# Exit 0 when every review was answered right and on time and every
# rotation was reloaded, 2 when not, 1 when the run itself failed.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
minutes=${1:-10}
pods=${2:-150000}
rate=${3:-200}
samples="${SOAK_SAMPLES:-$TARGET/soak-samples.tsv}"
bench_init
bench_build soak
echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
status=0
"$RELEASE/examples/soak" --minutes "$minutes" --pods "$pods" --rate "$rate" --samples "$samples" || status=$?
echo "per-second samples: $samples"
exit "$status"
