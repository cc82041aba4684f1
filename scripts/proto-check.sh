#!/usr/bin/env bash
# Fails when libs/mirror/src/gen or libs/client/src/gen is not what `npm run proto` makes of
# proto/ now: regenerates into a temp dir with the same template and compares. Part of
# `npm test` (pretest).
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
npx --no-install buf generate -o "$out"
for gen in libs/mirror/src/gen libs/client/src/gen; do
  if ! diff -r "$out/$gen" "$gen"; then
    echo "proto-check: $gen is stale; run \`npm run proto\` and commit the result" >&2
    exit 1
  fi
done
echo "proto-check: generated code is current"
