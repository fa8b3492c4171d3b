#!/usr/bin/env bash
# Tool calling with the official `openai` client against `tachyon serve` ($TACHYON_BIN), replies
# scripted (TACHYON_SCRIPTED_OUTPUTS). Installs the client into its venv on first use.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=$("$here/setup-venv")
exec timeout 600 "$venv/bin/python" "$here/test_openai_tools.py"
