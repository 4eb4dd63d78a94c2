#!/usr/bin/env bash
# make_corpus.py runs for every target and writes exactly the seed inputs the repository holds
# (a generator that fails, or corpora left behind by a change to one, fails here).
set -euo pipefail
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
POLLUX_CORPUS_OUT="$out" python3 tests/fuzz/make_corpus.py 2>/dev/null
n=0
for f in "$out"/*/*; do
  rel=${f#"$out"/}
  if ! cmp -s "$f" "tests/fuzz/corpus/$rel"; then
    echo "FAIL: $rel differs from tests/fuzz/corpus/$rel (run tests/fuzz/make_corpus.py)"
    exit 1
  fi
  n=$((n + 1))
done
[ "$n" -ge 100 ] || { echo "FAIL: only $n inputs written"; exit 1; }
echo "PASS: the $n generated inputs are the repository's"
