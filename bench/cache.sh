#!/usr/bin/env bash
# The owner cache in cluster mode (goals: <= 100 bytes per pod,
# RSS <= 32 MiB once ready at 150,000 pods, peak <= 64 MiB during the
# initial list and during a relist after 410 Gone): `ownerguard serve`
# against the loopback test API server holding N pods (default 150,000),
# measured from outside the process (examples/cache_bench.rs says how).
#
#   bash bench/cache.sh [N]
#
# Loopback only; bounded (10 minutes per phase at most). Exit 1 when the
# run itself goes wrong (not ready, a wrong pod count).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
bench_init
bench_build cache_bench
echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$RELEASE/examples/cache_bench" "${1:-150000}"
