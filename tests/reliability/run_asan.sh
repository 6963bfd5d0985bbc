#!/usr/bin/env bash
# Run Python tests against an ASan/UBSan build of the native driver (opt-in CI step).
#
#   tests/reliability/run_asan.sh [pytest args...]   (default: tests/reliability tests/driver)
#
# Copies the working tree (tracked and untracked, not ignored files) to a temporary
# directory, builds pypto_async._pto_driver there with
# PTO_DRIVER_CFLAGS='-fsanitize=address,undefined -fno-omit-frame-pointer', and runs pytest
# in the copy with libasan/libubsan preloaded (Python itself is not instrumented).  The
# source tree and its in-place build are never touched.  Leak detection is off: CPython
# and numpy keep allocations until exit.  Any ASan or UBSan report fails the run.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CC=${CC:-gcc}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pypto_asan.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

cd "$ROOT"
git ls-files -z --cached --others --exclude-standard | xargs -0 -I{} cp --parents {} "$WORK" 2>/dev/null || true
# cp --parents skips paths deleted in the working tree; that is fine.
cd "$WORK"
find . -name '*.so' -path './pypto_async/*' -delete
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
PTO_DRIVER_CFLAGS="$SAN" PTO_DRIVER_LDFLAGS="-fsanitize=address,undefined" \
    python pypto_async/_ffi_build.py >build.log 2>&1 || { cat build.log; exit 1; }

PRELOAD="$($CC -print-file-name=libasan.so) $($CC -print-file-name=libubsan.so)"
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=0:exitcode=86:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:exitcode=87"
export PYPTO_ASYNC_SANITIZED=1  # test_soak.py: ASan's quarantine makes RSS grow
export PYTHONPATH="$WORK${PYTHONPATH:+:$PYTHONPATH}"
# The copy, not the editable install, must be what runs.
LD_PRELOAD="$PRELOAD" python - <<'PY'
import os, pypto_async._pto_driver as d
for m in (d,):
    assert m.__file__.startswith(os.environ["PYTHONPATH"].split(":")[0]), m.__file__
    print("sanitized:", m.__file__)
PY
if [ $# -eq 0 ]; then
    # test_native.py builds and runs the C programs itself (under their own sanitizers);
    # with libasan preloaded into gcc, LeakSanitizer would report the compiler's leaks.
    set -- tests/reliability tests/driver --ignore=tests/driver/test_native.py
fi
LD_PRELOAD="$PRELOAD" python -m pytest -p no:cacheprovider -q -x -m "" "$@"
