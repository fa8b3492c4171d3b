#!/usr/bin/env bash
# `tachyon serve` over loopback: 1,000 concurrent streaming requests complete.
set -euo pipefail
exec timeout 900 python3 "$(dirname "$0")/test_server_load.py"
