#!/bin/sh
# Builds the fuzz targets (tests/fuzz) with Debian's clang 19 as libFuzzer
# programs under AddressSanitizer (LeakSanitizer on) and
# UndefinedBehaviorSanitizer, then runs each in turn for SECONDS (default 60),
# starting from its corpus and regression inputs (so the whole corpus runs
# first, every time). The build is build/asan, the one
# `scripts/test-sanitized.sh address` runs the suite in: the same flags, so
# after that run only the fuzz programs are left to link.
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
#   targets: gguf tokenizer range_response page_cache sampler (default: all)
#   FUZZ_MERGE=1  afterwards, merge the inputs that found new coverage into
#                 tests/fuzz/corpus/TARGET (for a long run whose corpus is kept)
#   FUZZ_RUNS=N   stop each target after N executions instead (SECONDS still
#                 bounds it; 0 seconds: no bound)
#
# An input that crashes, leaks, trips a sanitizer or a check, or runs over its
# time (timeout_s) is written to build/asan/fuzz/artifacts/TARGET/; the script goes on
# with the other targets, then fails. Once the bug is fixed, copy the input to
# tests/fuzz/regressions/TARGET/: every build's ctest replays it from then on.
# One fuzzing process at a time: the machine's cores are shared.
set -eu
cd "$(dirname "$0")/.."
seconds=${1:-60}
[ $# -gt 0 ] && shift
targets=${*:-gguf tokenizer range_response page_cache sampler}

build=build/asan
scripts/setup.sh fuzz
CC=clang-19 CXX=clang++-19 cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSIPLLM_SANITIZE=address,undefined -DSIPLLM_FUZZ=ON > /dev/null
programs=""
for target in $targets; do programs="$programs sipllm_fuzz_$target"; done
# shellcheck disable=SC2086
cmake --build $build --target $programs

# The largest input each target takes: a GGUF file of up to 64 KiB runs a
# whole forward pass in milliseconds; the others need only a few KiB.
max_len() {
  case $1 in
    gguf) echo 65536 ;;
    page_cache) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

# How long one input may run: a second, except range_response's, whose
# inputs may fetch and cache a file of 3 MiB in pages of 4 KiB: the slowest
# found take 0.4-0.5 s on an idle core, and one took over a second while the
# machine's cores were busy (libFuzzer's limit is wall-clock time).
timeout_s() {
  case $1 in
    range_response) echo 3 ;;
    *) echo 1 ;;
  esac
}

export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-19/bin/llvm-symbolizer
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
failed=""
summary=""
for target in $targets; do
  program=$build/tests/fuzz/sipllm_fuzz_$target
  found=$build/fuzz/found/$target
  artifacts=$build/fuzz/artifacts/$target
  log=$build/fuzz/$target.log
  mkdir -p "$found" "$artifacts" "tests/fuzz/regressions/$target"
  echo "fuzzing $target for ${seconds}s (log: $log)"
  dict=""
  [ -f "tests/fuzz/dict/$target.dict" ] && dict="-dict=tests/fuzz/dict/$target.dict"
  status=0
  runs_limit=""
  [ -n "${FUZZ_RUNS:-}" ] && runs_limit="-runs=$FUZZ_RUNS"
  # New inputs go to build/asan/fuzz/found/TARGET; the corpus and regressions are only read.
  # shellcheck disable=SC2086
  "$program" -max_total_time="$seconds" $runs_limit -timeout="$(timeout_s "$target")" -rss_limit_mb=2048 -max_len="$(max_len "$target")" \
    -detect_leaks=1 -print_final_stats=1 -artifact_prefix="$artifacts/" $dict \
    "$found" "tests/fuzz/corpus/$target" "tests/fuzz/regressions/$target" > "$log" 2>&1 || status=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  time=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -n 1)
  # The last status line: edges of the code covered (cov), features (ft), corpus size.
  coverage=$(grep -E '^#[0-9]+' "$log" | tail -n 1 | sed -n 's/.*\(cov: [0-9]* ft: [0-9]* corp: [0-9]*\).*/\1/p')
  if [ "$status" -ne 0 ]; then
    failed="$failed $target"
    echo "  FAILED (exit $status):"
    grep -E 'ERROR|SUMMARY|fuzz check failed|Test unit written|runtime error' "$log" | head -n 20 | sed 's/^/    /'
  fi
  summary="$summary$target ${runs:-?} executions in ${time:-?}s, ${coverage:-cov: ?}, exit $status
"
  if [ "${FUZZ_MERGE:-0}" = 1 ] && [ "$status" -eq 0 ]; then
    "$program" -merge=1 -timeout=1 -rss_limit_mb=2048 -max_len="$(max_len "$target")" \
      "tests/fuzz/corpus/$target" "$found" > "$build/fuzz/$target.merge.log" 2>&1
  fi
done

printf '%s' "$summary"
if [ -n "$failed" ]; then
  echo "fuzzing failed:$failed (inputs in $build/fuzz/artifacts/)" >&2
  exit 1
fi
