#!/usr/bin/env bash
# `tachyon serve` over loopback: every endpoint, streaming and not, and the wire rules.
set -euo pipefail
exec timeout 900 python3 "$(dirname "$0")/test_server_api.py"
