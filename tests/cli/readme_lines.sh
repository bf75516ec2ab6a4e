#!/usr/bin/env bash
# readme_lines.sh PARITY BUILD_DIR README: runs every line of the README's "Other commands"
# block as written, in order (later lines read what earlier ones wrote), in a scratch folder
# that holds the repository's scenarios/ and the build as build/default. A line's expected exit
# code is the "exit N" its comment names, else 0. /tmp/ in a line becomes the scratch folder
# (CTest runs tests side by side). The torchrun line is runtime.torchrun_readme_line's, the
# two 64-case sweep lines are sweep.cpu_64's.
set -uo pipefail
parity="$(realpath "$1")"; build="$(realpath "$2")"; readme="$(realpath "$3")"
root="$(dirname "$readme")"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/parity-readme.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/build"
ln -s "$root/scenarios" "$scratch/scenarios"
ln -s "$build" "$scratch/build/default"
cd "$scratch"
block="$(awk '/^## Other commands/{on=1; next} on && /^```sh/{inb=1; next} inb && /^```/{exit} inb' "$readme")"
[[ -n "$block" ]] || { echo "no \"## Other commands\" sh block in $readme"; exit 1; }
ran=0; failed=0
while IFS= read -r line; do
  [[ -z "${line// }" ]] && continue
  command="$(sed 's/  *# .*$//' <<<"$line")"
  comment="$(sed -n 's/^.*  # //p' <<<"$line")"
  if [[ "$command" == P=* ]]; then continue; fi
  if [[ "$command" == torchrun* ]]; then
    echo "-- skipped here (runtime.torchrun_readme_line runs it): $command"
    continue
  fi
  # The two 64-case sweeps (about 20 s each) are sweep.cpu_64's, which runs them as here.
  if [[ "$command" == *"sweep scenarios/sweeps/cpu-64.json"* ]]; then
    echo "-- skipped here (sweep.cpu_64 runs it): $command"
    continue
  fi
  expected=0
  if [[ "$comment" =~ exit\ ([0-9]) ]]; then expected="${BASH_REMATCH[1]}"; fi
  cmd="${command//\$P/$parity}"
  cmd="${cmd//\/tmp\//$scratch/tmp/}"
  mkdir -p "$scratch/tmp"
  echo "-- $command   (expect exit $expected)"
  out="$(timeout 600 bash -c "$cmd" 2>&1)"; code=$?
  ran=$((ran + 1))
  if [[ "$code" != "$expected" ]]; then
    failed=$((failed + 1))
    echo "$out" | tail -25
    echo "FAILED: exit $code, expected $expected: $command"
  fi
done <<<"$block"
echo "$ran README line(s) ran, $failed failed"
[[ $ran -gt 0 && $failed == 0 ]]
