#!/usr/bin/env bash
# Fails when libs/mirror/src/gen is not what `npm run proto` makes of proto/ now: regenerates
# into a temp dir with the same template and compares. Part of `npm test` (pretest).
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
npx --no-install buf generate -o "$out"
if ! diff -r "$out/libs/mirror/src/gen" libs/mirror/src/gen; then
  echo "proto-check: libs/mirror/src/gen is stale; run \`npm run proto\` and commit the result" >&2
  exit 1
fi
echo "proto-check: generated code is current"
