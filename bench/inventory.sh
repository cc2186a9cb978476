#!/usr/bin/env bash
# Memory of `ownerguard serve --pods FILE` with a big inventory (goal:
# peak RSS <= 64 MiB for 150,000 pods): for each inventory, the
# peak RSS (VmHWM) of the process from its start to /readyz, its RSS once
# ready, and the time to ready. Inventories from bench/inventory.py, as
# `kubectl get pods -A -o json|yaml` prints them:
#
#   names  name, namespace, uid only, compact JSON (the 13 MB file of the issue)
#   real   a Deployment's pod in full (labels, annotations, ownerReferences,
#          spec, status; no managedFields), as kubectl indents it
#
#   bash bench/inventory.sh [PODS] [VARIANT...]   (150000; names-json names-yaml real-json real-yaml)
#
# Loopback only; one process at a time; bounded (10 minutes per variant).
# A benchmark: it measures and prints. Exit 1 on its own errors (a
# variant that does not get ready, a pod count that is not PODS); exit 2
# when ownerguard refused an inventory (shown in the table with its error).
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
pods=${1:-150000}
shift || true
variants=("$@")
[[ ${#variants[@]} -gt 0 ]] || variants=(names-json names-yaml real-json real-yaml)

bench_init
# shellcheck disable=SC2119 # the binary alone
bench_build
rows=()
refused=0
for variant in "${variants[@]}"; do
  shape=${variant%-*} format=${variant#*-}
  file="$(bench_inventory "$pods" "$shape" "$format")"
  size=$(stat -c %s "$file")
  blog "$variant: serve --pods $(basename "$file") ($(mib $((size / 1024))) MiB)"
  started=$(date +%s.%N)
  if ! OG_START_TIMEOUT=600 og_start "$variant" "" --pods "$file"; then
    rows+=("| $variant | $(mib $((size / 1024))) MiB | refused: $(cut -c1-160 <<<"${OG_ERROR#ownerguard: }" | tr '|' '/') | | |")
    refused=1
    continue
  fi
  wait_ready "$OG_METRICS" 600
  ready=$(date +%s.%N)
  sleep 0.5
  hwm=$(proc_kb "$OG_PID" VmHWM)
  rss=$(proc_kb "$OG_PID" VmRSS)
  counted="$(grep -m1 'owner lookup from a static inventory' "$BENCH_WORK/$variant.log" | jq -r .pods)"
  [[ "$counted" == "$pods" ]] || die "$variant: ownerguard counted $counted pods, not $pods"
  stop_pid "$OG_PID"
  rows+=("| $variant | $(mib $((size / 1024))) MiB | $(awk -v a="$started" -v b="$ready" 'BEGIN { printf "%.1f s", b - a }') | $(mib "$hwm") MiB | $(mib "$rss") MiB |")
done

echo
echo "ownerguard serve --pods, $pods pods ($(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg))"
echo
echo "| inventory | file | ready after | peak RSS to /readyz (VmHWM) | RSS once ready |"
echo "|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
if [[ $refused == 1 ]]; then
  echo
  echo "ownerguard refused at least one inventory (see the table)"
  exit 2
fi
