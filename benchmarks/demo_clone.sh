#!/bin/bash
# The README's first command, verbatim, on a fresh clone of this checkout's HEAD: times the
# install and `attnlab demo` (docs/getting-started.md). Run it with the machine to itself.
#   bash benchmarks/demo_clone.sh [CLONE_DIR]     (default /tmp/democlone; replaced if present)
set -e
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
clone=${1:-/tmp/democlone}
rm -rf "$clone" && git clone -q "$repo" "$clone" && cd "$clone"
git log --oneline -1
start=$(date +%s)
python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e . > "$clone.install.log" 2>&1
installed=$(date +%s)
echo "install: $((installed - start)) s"
.venv/bin/attnlab demo
end=$(date +%s)
echo "demo: $((end - installed)) s wall; install + demo: $((end - start)) s"
