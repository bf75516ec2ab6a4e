#!/usr/bin/env bash
# baseline.sh PARITY MATRIX: `parity sweep --baseline DIR` against a stored
# sweep folder. The same sweep again: 0 differences, exit 0, summary.json's
# "baseline" says how many cases it compared. A baseline whose one metric value
# moved by 1 %: exit 1 naming the case, the metric and both values; the merge of
# shards takes --baseline too. A folder that is not a sweep: exit 2, one line.
set -euo pipefail
parity="$1"; matrix="$2"
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
"$parity" sweep "$matrix" --out "$work/base" --jobs 2 >/dev/null
out=$("$parity" sweep "$matrix" --out "$work/same" --jobs 2 --baseline "$work/base")
echo "$out" | grep -E "^baseline " || { echo "FAIL: no baseline line"; exit 1; }
[[ "$out" == *"0 difference(s) in 8 compared case(s) (0 not in the baseline)"* ]] ||
  { echo "FAIL: the same sweep differs from its baseline"; exit 1; }
python3 - "$work/same/summary.json" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))["baseline"]
assert b["compared"] == 8 and b["differences"] == [], b
PY

# Move the first case's first metric value by 1 % in a copy of the baseline.
cp -r "$work/base" "$work/moved"
python3 - "$work/moved/results.jsonl" > "$work/moved.txt" <<'PY'
import json, sys
path = sys.argv[1]
records = [json.loads(line) for line in open(path)]
m = records[0]["report"]["metrics"][0]
m["value"] *= 1.01
open(path, "w").write("".join(json.dumps(r) + "\n" for r in records))
print(records[0]["case"], m["metric"], m["label"])
PY
set +e
out=$("$parity" sweep "$matrix" --out "$work/vs-moved" --jobs 2 --baseline "$work/moved" 2>&1)
code=$?
set -e
echo "$out" | grep -A2 -E "^baseline "
[[ $code == 1 ]] || { echo "FAIL: a moved baseline exited $code, expected 1"; exit 1; }
[[ "$out" == *"1 difference(s) in 8 compared case(s)"* ]] || { echo "FAIL: expected 1 difference"; exit 1; }
grep -q "metric" <<<"$out" || { echo "FAIL: the difference does not name the metric"; exit 1; }
python3 - "$work/vs-moved/summary.json" "$work/moved.txt" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))["baseline"]["differences"]
words = open(sys.argv[2]).read().split()
metric, label = words[-2], words[-1]
case = " ".join(words[:-2])
assert len(d) == 1, d
assert d[0]["case"] == case and metric in d[0]["what"] and label in d[0]["what"], d
assert d[0]["baseline"] != d[0]["current"], d
print("difference:", d[0])
PY
grep -q '<li class="baseline-difference"><code>' "$work/vs-moved/report.html" ||
  { echo "FAIL: report.html does not show the baseline difference"; exit 1; }

# Shards merged against the baseline: the same verdict as one run.
"$parity" sweep "$matrix" --out "$work/s1" --shard 1/2 >/dev/null
"$parity" sweep "$matrix" --out "$work/s2" --shard 2/2 >/dev/null
set +e
"$parity" sweep --merge "$work/s1" "$work/s2" --out "$work/merged" --baseline "$work/moved" >/dev/null 2>&1
code=$?
set -e
[[ $code == 1 ]] || { echo "FAIL: merge against the moved baseline exited $code, expected 1"; exit 1; }

# Not a sweep folder: exit 2, one line naming it.
set +e
out=$("$parity" sweep "$matrix" --out "$work/none" --baseline "$work/nowhere" 2>&1)
code=$?
set -e
echo "$out"
[[ $code == 2 && $(wc -l <<<"$out") == 1 && "$out" == *"--baseline $work/nowhere: "* ]] ||
  { echo "FAIL: a missing baseline folder exited $code"; exit 1; }
[[ ! -e "$work/none" ]] || { echo "FAIL: a refused sweep wrote its folder"; exit 1; }
echo "baseline: ok"
