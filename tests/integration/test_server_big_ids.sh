#!/usr/bin/env bash
# The 32 MB list of prompt token ids: refused with a 400 while other streams flow, memory given
# back (test_server_big_ids.py).
set -euo pipefail
exec timeout 900 python3 "$(dirname "$0")/test_server_big_ids.py"
