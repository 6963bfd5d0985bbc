#!/usr/bin/env bash
# Build the driver and each native/tests/*.c program, run them under a timeout.
#
#   native/tests/run.sh [asan|tsan|plain]   (default: asan)
#
# asan: -fsanitize=address,undefined; tsan: -fsanitize=thread (gcc).
# Exit status 0 only if every test passed or skipped (77) and no sanitizer
# reported anything (sanitizer reports abort the program with a nonzero code).
# Environment: CC (gcc), PTO_TEST_TIMEOUT (seconds per test, 120),
# PTO_STRESS_SECONDS (stress duration, 3).
set -u
MODE=${1:-asan}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CC=${CC:-gcc}
TIMEOUT=${PTO_TEST_TIMEOUT:-120}
OUT="$ROOT/native/build/tests-$MODE"

case "$MODE" in
asan)
    SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
    export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0:exitcode=86:detect_stack_use_after_return=1"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:exitcode=87"
    ;;
tsan)
    SAN="-fsanitize=thread -fno-omit-frame-pointer"
    export TSAN_OPTIONS="halt_on_error=1:exitcode=66:second_deadlock_stack=1:report_signal_unsafe=0"
    ;;
plain)
    SAN=""
    ;;
*)
    echo "usage: $0 [asan|tsan|plain]" >&2
    exit 2
    ;;
esac

CFLAGS="-std=gnu11 -O1 -g -pthread -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter $SAN"
INC="-I$ROOT/native/include -I$ROOT/pypto_async/include -I$ROOT/native/src"
mkdir -p "$OUT"

echo "== building driver ($MODE)"
OBJS=()
for src in "$ROOT"/native/src/*.c; do
    obj="$OUT/$(basename "${src%.c}").o"
    $CC $CFLAGS $INC -c "$src" -o "$obj" || { echo "FAIL: build $src"; exit 1; }
    OBJS+=("$obj")
done

# Libraries the tests load (native/tests/lib/NAME.c -> $OUT/libNAME.so), found through PTO_TEST_LIBDIR.
for src in "$HERE"/lib/*.c; do
    [ -e "$src" ] || continue
    $CC $CFLAGS $INC -shared -fPIC "$src" -o "$OUT/lib$(basename "${src%.c}").so" || { echo "FAIL: build $src"; exit 1; }
done
export PTO_TEST_LIBDIR="$OUT"

pass=0 fail=0 skip=0
failed=()
for test in "$HERE"/*.c; do
    name=$(basename "${test%.c}")
    bin="$OUT/$name"
    if ! $CC $CFLAGS $INC "$test" "${OBJS[@]}" -o "$bin" -ldl -lm; then
        echo "FAIL: $name (build)"
        fail=$((fail + 1)); failed+=("$name"); continue
    fi
    start=$(date +%s%N)
    # setarch -R: TSan cannot map its shadow with high-entropy ASLR on newer kernels.
    if [ "$MODE" = tsan ] && setarch "$(uname -m)" -R true 2>/dev/null; then
        timeout -k 5 "$TIMEOUT" setarch "$(uname -m)" -R "$bin" > "$OUT/$name.log" 2>&1
    else
        timeout -k 5 "$TIMEOUT" "$bin" > "$OUT/$name.log" 2>&1
    fi
    rc=$?
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    secs="$((ms / 1000)).$(( (ms % 1000) / 100 ))"
    # A sanitizer report fails the test even if the program exited 0.
    if [ "$rc" = 0 ] && grep -qE "ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|runtime error:" "$OUT/$name.log"; then
        rc=99
    fi
    case $rc in
    0) echo "PASS: $name (${secs}s)"; pass=$((pass + 1)) ;;
    77) echo "SKIP: $name"; skip=$((skip + 1)) ;;
    124|137) echo "FAIL: $name timed out after ${TIMEOUT}s"; fail=$((fail + 1)); failed+=("$name") ;;
    *) echo "FAIL: $name (exit $rc)"; fail=$((fail + 1)); failed+=("$name") ;;
    esac
    if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
        tail -n 60 "$OUT/$name.log" | sed 's/^/    /'
    else
        grep -v '^$' "$OUT/$name.log" | tail -n 3 | sed 's/^/    /'
    fi
done
echo "== $MODE: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
