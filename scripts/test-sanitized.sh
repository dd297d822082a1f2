#!/bin/sh
# Builds the native suite under sanitizers and runs it; any sanitizer report
# fails the run.
#
#   scripts/test-sanitized.sh address   AddressSanitizer (LeakSanitizer on) and
#       UndefinedBehaviorSanitizer, with clang 19, into build/asan: every ctest
#       test that runs engine code (the GoogleTest suite, the script tests
#       that run the CLI, the fuzz corpus replays). The build also carries
#       libFuzzer's coverage, so that scripts/fuzz.sh fuzzes from the same
#       objects instead of building them again.
#   scripts/test-sanitized.sh thread    ThreadSanitizer, with the default
#       compiler, into build/tsan: the GoogleTest suites that start threads
#       (all but those of single-threaded code) in one process (not a
#       process per test: its suites share their set-up, which would
#       repeat at ThreadSanitizer's pace), then the ctest tests
#       that run the CLI on every model family (they start the loader and the
#       thread pool too), and the fuzz replays that start threads (the
#       engine's, the HTTP source's).
#
# Reports also go to files in build/<dir>/sanitizer-reports/: a report from a
# process a test expects to fail (the CLI given bad input) fails the run too.
set -eu
cd "$(dirname "$0")/.."
kind=${1:-}
case $kind in
  address)
    dir=build/asan
    scripts/setup.sh fuzz
    CC=clang-19 CXX=clang++-19 cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DSIPLLM_SANITIZE=address,undefined -DSIPLLM_FUZZ=ON > /dev/null
    ;;
  thread)
    dir=build/tsan
    scripts/setup.sh native
    cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSIPLLM_SANITIZE=thread > /dev/null
    ;;
  *)
    echo "usage: $0 address|thread" >&2
    exit 2
    ;;
esac
if [ "$kind" = address ]; then
  cmake --build "$dir"
else
  # What the thread run needs, and no more: the benchmarks and the fuzz
  # targets that start no thread are left out (a ThreadSanitizer build is slow).
  cmake --build "$dir" --target sipllm sipllm_tests sipllm_fuzz_gguf sipllm_fuzz_range_response sipllm_fuzz_page_cache
fi

reports=$PWD/$dir/sanitizer-reports
rm -rf "$reports"
mkdir -p "$reports"
export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-19/bin/llvm-symbolizer
export ASAN_OPTIONS="detect_leaks=1:log_path=$reports/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$reports/tsan"

status=0
if [ "$kind" = address ]; then
  # Not the numpy reference's own checks against llama.cpp: they run no
  # engine code (the engine's against llama.cpp's, EngineVsLlamaCpp.*, do).
  ctest --test-dir "$dir" --output-on-failure -j2 -E '^(ReferenceVsLlamaCpp\.|ReferenceDeltaNetChunked\.)' || status=$?
else
  # One process: each test's engine already keeps both cores busy (its
  # thread pool, the loader's threads), and two processes side by side took
  # 398 and 651 s where the same tests take 409 s one after the other (their
  # threads, slowed by the sanitizer, waited on each other's cores). The
  # suites of code that runs on one thread (parsers, tokenizers, grammars,
  # quantization formats, the sampler, the option ranges) are left to the
  # other runs: they start no thread, and took half of this run's time; so is
  # the test that every expert is reached (96 single-threaded engines, two
  # minutes here for nothing a thread does).
  left_out='BadInput*:Generator*:Gguf*:Grammar*:Half*:HttpCacheIndex*:HttpRangeCheck*:Json*:Quant*'
  left_out="$left_out:Sampler*:SplitNames*:TensorType*:Token*:Vocab*:GenerateOptionRanges*"
  left_out="$left_out:Experts.EveryExpertIsReachedBySomeTokenAndReadFromItsOwnRows"
  "$dir/tests/sipllm_tests" --gtest_brief=1 --gtest_filter="-$left_out" || status=$?
  ctest --test-dir "$dir" --output-on-failure -j2 \
    -R '^(ReferenceLogits\.|EngineVsLlamaCpp\.|FuzzCorpus\.(gguf|range_response|page_cache)$)' || status=$?
fi

if [ -n "$(ls -A "$reports")" ]; then
  for report in "$reports"/*; do
    echo "== $report"
    cat "$report"
  done
  echo "sanitizer reports in $reports" >&2
  status=1
fi
exit $status
