#!/usr/bin/env bash
# Takes the documentation's screenshots from real daemons: the live page (docs/images/
# live-page.png) through the live page's test, which starts a job of four ranks, checks the page
# in headless Chromium and writes its screenshot where TSHARD_SCREENSHOT_DIR says; and a trace
# opened in speedscope (docs/images/trace-speedscope.png, docs/trace_screenshot.py), speedscope
# installed from the npm registry into build/docs-tools. Needs a build in build/ (or BUILD=dir),
# Debian's chromium (deploy/install-deps.sh installs it) and npm.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p docs/images
TSHARD_SCREENSHOT_DIR=docs/images PYTHONPATH="$build/python:tests/python" \
  timeout 300 /usr/bin/python3 tests/python/test_live_page.py "$build/bin"
echo "docs/images/live-page.png written"
tools="$build/docs-tools"
viewer="$tools/node_modules/speedscope/dist/release"
if [ ! -f "$viewer/index.html" ]; then
  mkdir -p "$tools"
  npm install --prefix "$tools" --no-audit --no-fund --silent speedscope@1.25.0
fi
PYTHONPATH="$build/python" timeout 300 /usr/bin/python3 docs/trace_screenshot.py "$build/bin" \
  "$viewer" docs/images/trace-speedscope.png
