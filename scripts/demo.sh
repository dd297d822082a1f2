#!/bin/sh
# Builds the browser engine and serves the demo page with the bundled model.
#   scripts/demo.sh [--host HOST] [--port PORT]    (default: 127.0.0.1, port 5173)
# Open the printed URL in Chromium (or any recent browser). The page is
# cross-origin isolated only on localhost or over https; opened by another
# address it runs the single-thread build and says so.
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh web
scripts/build-wasm.sh
npm ci --no-audit --no-fund
npm run build --workspace web

host=127.0.0.1
port=5173
while [ $# -gt 0 ]; do
  case "$1" in
    --host) host=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    *) echo "usage: $0 [--host HOST] [--port PORT]" >&2; exit 2 ;;
  esac
done

echo
echo "Serving the demo at http://$host:$port/ (Ctrl-C stops it)."
cd demo
# --strictPort: the URL above is the one served, or the command fails.
exec npx --no-install vite --host "$host" --port "$port" --strictPort
