#!/usr/bin/env bash
# The sanitizer runs (tests/README.md). Every run halts at the first report and fails.
#
#   scripts/sanitize.sh              asan, then tsan
#   scripts/sanitize.sh asan         ASan + UBSan + LSan: every suite that needs no LLVM/MLIR (the
#                                    runtime, the eager frontend, the C API, tools, examples,
#                                    the artifact corpus replay)
#   scripts/sanitize.sh tsan         ThreadSanitizer: the thread pool, concurrent sessions, the C
#                                    API from several threads, eager autograd from several threads
#   scripts/sanitize.sh ci           what .ci/run adds to the test command: asan on the runtime,
#                                    loader and C API tests, a 60-second loader fuzzer smoke run
#                                    and (with clang-19) one of the ONNX importer
#   scripts/sanitize.sh full         asan-full: every suite, MLIR-heavy ones included (hours)
#   scripts/sanitize.sh fuzz [SECS]  only the loader fuzzer (needs clang and a release build)
#   scripts/sanitize.sh fuzz-onnx [SECS]  only the ONNX importer fuzzer (clang-19, release build)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
jobs=${KILN_BUILD_JOBS:-$(nproc)}

# Reports stop the run (UBSan: -fno-sanitize-recover in the presets as well); LSan runs at exit.
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=1:detect_leaks=1:strict_init_order=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
# No suppressions: kiln's own code is clean, and no third-party code in these runs needed one.
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

configure() {  # preset
  bash scripts/bootstrap.sh
  [ -f "build/$1/build.ninja" ] || cmake --preset "$1" >/dev/null
}

# Not sanitizer runs of kiln code: the arm64 cross build under qemu; the check that objects
# built for AVX-512 have no static constructors, which the sanitizers add to every object (their
# module initializers, `_GLOBAL__sub_I_00099_*`, call only the sanitizer runtime); and the
# installed-package test, whose consumers build with a user's plain flags and cannot link an
# instrumented static runtime.
not_here='^(aarch64/|layering/isa_objects_have_no_static_init$|install/)'

run_asan() {
  configure asan
  cmake --build --preset asan -j "$jobs"
  ctest --preset asan -j "$jobs" -E "$not_here"
}

# The concurrent parts. Hogwild's shared floats go through std::atomic_ref, so it is in scope.
tsan_targets=(kiln_runtime_tests kiln_frontend_tests kiln_c_api_threads_test example_embed)
tsan_tests='^(ThreadPool\.|TCPStore\.|ProcessGroup\.|InitProcessGroup\.|DistributedDataParallel\.|Artifact\.SessionsRunConcurrently|ElementwiseThreads\.|Random\.ReproducibleAcrossThreads|Reduce\.SameResultOnOneAndTwoThreads|Conv\.Conv2d(ForwardSingleThreadAndBatchParallel|BackwardThreadingStrategies)|Hogwild\.|AutogradThreads\.|runtime/c_api_threads|examples/embed_corpus)'
run_tsan() {
  configure tsan
  cmake --build --preset tsan -j "$jobs" --target "${tsan_targets[@]}"
  ctest --preset tsan -j "$jobs" -R "$tsan_tests" --no-tests=error
}

run_fuzz() {  # seconds
  local secs=${1:-60}
  command -v clang++ >/dev/null || { echo "sanitize.sh: the fuzzer needs clang++" >&2; exit 1; }
  [ -f build/release/runtime/libkiln_runtime.a ] || bash scripts/build.sh release --target kiln_runtime
  [ -f build/fuzz/build.ninja ] ||
    CXX=clang++ cmake -S fuzz -B build/fuzz -G Ninja -DCMAKE_CXX_COMPILER_LAUNCHER="$(command -v ccache || true)" >/dev/null
  cmake --build build/fuzz -j "$jobs"
  local work
  work=$(mktemp -d)
  cp fuzz/corpus/* tests/data/artifact_corpus/broken/* "$work"/
  # One job: the smoke run finds what a minute of mutations of the seeds finds, without a crash.
  build/fuzz/fuzz_loader -max_total_time="$secs" -rss_limit_mb=4096 -print_final_stats=1 \
    "$work" 2>&1 | tail -n 15
  rm -rf "$work"
}

run_fuzz_onnx() {  # seconds: the ONNX importer (clang 15+ for kiln's eager headers)
  local secs=${1:-60}
  command -v clang++-19 >/dev/null ||
    { echo "sanitize.sh: the ONNX fuzzer needs clang++-19 (apt-get install clang-19 libclang-rt-19-dev)" >&2; exit 1; }
  [ -f build/release/frontend/libkiln.a ] || bash scripts/build.sh release --target kiln kiln_runtime
  [ -f build/fuzz-onnx/build.ninja ] ||
    CXX=clang++-19 cmake -S fuzz -B build/fuzz-onnx -G Ninja -DCMAKE_CXX_COMPILER_LAUNCHER="$(command -v ccache || true)" >/dev/null
  cmake --build build/fuzz-onnx -j "$jobs" --target fuzz_onnx
  local work
  work=$(mktemp -d)
  cp fuzz/onnx_corpus/* "$work"/
  build/fuzz-onnx/fuzz_onnx -max_total_time="$secs" -rss_limit_mb=4096 -timeout=20 \
    -print_final_stats=1 "$work" 2>&1 | tail -n 15
  rm -rf "$work"
}

run_ci() {
  configure asan
  cmake --build --preset asan -j "$jobs" --target kiln_runtime_tests kiln_c_api_test \
    kiln_c_api_threads_test kiln_artifact_replay
  ctest --preset asan -j "$jobs" -R '^(runtime/|fuzz/|[A-Za-z]+\.)' -E "$not_here" \
    --no-tests=error
  run_fuzz 60
  if command -v clang++-19 >/dev/null && [ -f /usr/include/onnx/onnx.proto ]; then
    run_fuzz_onnx 60
  fi
}

run_full() {
  configure asan-full
  cmake --build --preset asan-full -j "$jobs"
  ctest --preset asan-full -j "$jobs" -E "$not_here"
}

case "${1:-all}" in
  all) run_asan && run_tsan ;;
  asan) run_asan ;;
  tsan) run_tsan ;;
  ci) run_ci ;;
  full) run_full ;;
  fuzz) run_fuzz "${2:-60}" ;;
  fuzz-onnx) run_fuzz_onnx "${2:-60}" ;;
  *) echo "usage: scripts/sanitize.sh [all|asan|tsan|ci|full|fuzz [SECONDS]]" >&2; exit 2 ;;
esac
