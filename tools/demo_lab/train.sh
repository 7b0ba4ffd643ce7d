#!/usr/bin/env bash
# StarForge runs this with bash from the lab root (the workspace). FORGE_OUT_DIR survives the job.
set -euo pipefail
exec python3 "$(dirname "$0")/train.py"
