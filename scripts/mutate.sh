#!/usr/bin/env bash
# npm run mutate: StrykerJS over libs/domain (stryker.config.mjs), then docs/mutation.md from
# its JSON report. The report is regenerated even when the score is under the break threshold,
# and the command then fails with StrykerJS's status; an unexplained survivor fails it too.
set -u
cd "$(dirname "$0")/.."
report=reports/mutation/mutation.json
# A run that fails before reporting must not leave the previous run's report to be rendered.
rm -f "$report"
npx stryker run "$@"
status=$?
if [ ! -f "$report" ]; then
  echo "mutate: StrykerJS wrote no report ($report); docs/mutation.md is unchanged" >&2
  exit "$status"
fi
# StrykerJS keeps each killed mutant's failure message in the incremental file, for a property
# test its whole counterexample (60 MB in all): the next run does not need them.
incremental=docs/mutation/stryker-incremental.json
if [ -f "$incremental" ]; then
  node -r ts-node/register/transpile-only scripts/mutation-merge.ts "$incremental" "$incremental" || exit $?
fi
node -r ts-node/register/transpile-only scripts/mutation-report.ts \
  "$report" docs/mutation.md docs/mutation/survivors.yaml || exit $?
exit "$status"
