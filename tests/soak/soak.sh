#!/usr/bin/env bash
# Soak under faults (tests/soak/soak.py): `tachyon serve` of the ASan build under mixed load with
# client faults, live flag changes and an overload burst, then the accounting. Not in CI.
#   tests/soak/soak.sh                  # 30 minutes, build/asan/tachyon (built if missing)
#   tests/soak/soak.sh --duration 300   # shorter; also --concurrency N, --burst N, --seed N,
#                                       # --backend cpu (default null: no model math),
#                                       # --async-scheduling on (steps ahead, with --backend cpu)
#   TACHYON_BIN=build/release/tachyon tests/soak/soak.sh --duration 60   # a quick try
# Prints a JSON summary (record it in bench/RESULTS.md); exits 1 listing any problem.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
if [ -z "${TACHYON_BIN:-}" ]; then
    [ -x "$root/build/asan/tachyon" ] || "$root/scripts/build" Asan -DTACHYON_CUDA=OFF
    export TACHYON_BIN="$root/build/asan/tachyon"
fi
export TACHYON_FIXTURES="${TACHYON_FIXTURES:-$root/tests/fixtures}"
exec python3 "$root/tests/soak/soak.py" "$@"
