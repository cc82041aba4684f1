#!/usr/bin/env bash
# Installs the Dockerfile linter (hadolint) and the Kubernetes schema validator into a
# private virtualenv, .cache/deploy-tools, for deploy/deploy.unit.spec.ts. Reinstalls only
# when deploy/requirements-check.txt changes. Part of `npm test` (pretest).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.cache/deploy-tools
requirements=deploy/requirements-check.txt
stamp="$venv/.requirements"
if [ -f "$stamp" ] && cmp -s "$stamp" "$requirements"; then
  echo "deploy-tools: current in $venv"
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
cp "$requirements" "$stamp"
echo "deploy-tools: installed $(tr '\n' ' ' < <(grep -v '^#' "$requirements")) in $venv"
