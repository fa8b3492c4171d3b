#!/usr/bin/env bash
# `tachyon serve` over loopback: 100 clients that leave mid-stream, mid-prefill or mid-wait free their KV blocks.
set -euo pipefail
exec timeout 900 python3 "$(dirname "$0")/test_server_disconnect.py"
