#!/usr/bin/env bash
# The two set-up commands of the README, for a fresh Debian 12 that may lack even make:
#   ./quickstart.sh demo   install what is missing, build, train the demo model, sample from it
#   ./quickstart.sh test   install what is missing, build, run every test
set -euo pipefail
cd "$(dirname "$0")"
case "${1:-}" in
  demo|test) ;;
  *) echo "usage: ./quickstart.sh demo|test" >&2; exit 2 ;;
esac
./scripts/install-deps.sh "$1"
exec make "$1"
