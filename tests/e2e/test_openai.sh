#!/usr/bin/env bash
# The official `openai` Python client against `tachyon serve` ($TACHYON_BIN): sync, async,
# streaming and errors. Installs the client into its venv on first use (setup-venv).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=$("$here/setup-venv")
exec timeout 600 "$venv/bin/python" "$here/test_openai_client.py"
