#!/usr/bin/env bash
# `tachyon serve` over loopback: malformed and hostile requests get the right 4xx; slow clients are cut off.
set -euo pipefail
exec timeout 900 python3 "$(dirname "$0")/test_server_hostile.py"
