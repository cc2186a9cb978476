#!/usr/bin/env bash
# Coverage-guided fuzzing of the decision, every answer judged by the oracle
# of tests/oracle/ (see docs/testing.md, "The oracle and fuzzing"). Not part of CI.
#
#   bench/fuzz.sh MINUTES [TARGET...]     (default: 10 minutes, both targets)
#
# Targets: `review` (structured reviews from a grammar of the dangerous
# parts) and `review_json` (raw bodies, seeded with every test fixture).
# The time is split between the targets. A finding is a file under
# fuzz/artifacts/<target>/; replay it with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run --fuzz-dir fuzz -s none <target> <file>
# and turn it into a golden case under tests/fixtures/<rule>/.
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-10}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(review review_json)

command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
# cargo-fuzz needs nightly flags; the stable toolchain accepts them so.
export RUSTC_BOOTSTRAP=1
# Its own target directory: sanitizer-coverage builds would thrash the
# main one.
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$PWD/fuzz/target}

# Seed review_json with every request the tests know (a first byte 0: the
# default settings).
mkdir -p fuzz/corpus/review_json fuzz/corpus/review
for request in tests/fixtures/*/request.json tests/fixtures/public/*.json; do
  name=$(echo "$request" | tr '/' '_')
  { printf '\0'; cat "$request"; } > "fuzz/corpus/review_json/$name"
done

# FUZZ_KEEP_GOING=1: go on after a finding (libFuzzer's fork mode), to see
# every class of wrong answer in one run rather than the first.
keep_going=()
[ "${FUZZ_KEEP_GOING:-0}" = 1 ] && keep_going=(-fork=1 -ignore_crashes=1)

seconds=$(( minutes * 60 / ${#targets[@]} ))
for target in "${targets[@]}"; do
  echo "== $target: ${seconds}s"
  nice -n 19 cargo fuzz run --fuzz-dir fuzz -s none "$target" -- \
    -max_total_time="$seconds" -timeout=10 -max_len=16384 \
    -dict=fuzz/review.dict -print_final_stats=1 "${keep_going[@]}" || true
done

echo "== findings"
found=0
for target in "${targets[@]}"; do
  for artifact in fuzz/artifacts/"$target"/*; do
    [ -e "$artifact" ] || continue
    echo "$artifact"
    found=1
  done
done
[ "$found" = 0 ] && echo "none"
# Each finding replayed, grouped by what the oracle finds wrong.
if [ "$found" = 1 ]; then
  for target in "${targets[@]}"; do
    ls fuzz/artifacts/"$target"/crash-* >/dev/null 2>&1 || continue
    echo "== $target, by class"
    python3 fuzz/triage.py "$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release/$target" "fuzz/artifacts/$target"
  done
fi
exit "$found"
