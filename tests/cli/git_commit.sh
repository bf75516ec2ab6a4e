#!/usr/bin/env bash
# git_commit.sh CMAKE GIT_COMMIT_CMAKE: cmake/git_commit.cmake names the commit
# of a folder that is the top of a git checkout (with -dirty after an edit), and
# "unknown" for a folder without .git, even one inside another checkout, and
# without git.
set -euo pipefail
cmake="$1"; script="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
commit_of() {  # SOURCE_DIR [GIT] -> the commit the generated file returns
  "$cmake" -DSOURCE_DIR="$1" -DOUTPUT="$tmp/out.cpp" -DGIT="${2-}" -P "$script"
  sed -n 's/.*return "\(.*\)";.*/\1/p' "$tmp/out.cpp"
}
fail=0
check() {  # WHAT GOT EXPECTED-REGEX
  if [[ "$2" =~ ^$3$ ]]; then echo "ok: $1: $2"; else echo "FAIL: $1: $2 (expected $3)"; fail=1; fi
}
git=$(command -v git)
mkdir -p "$tmp/repo/sub"
git -C "$tmp/repo" init -q
echo a >"$tmp/repo/f"
git -C "$tmp/repo" add f
git -C "$tmp/repo" -c user.name=t -c user.email=t@t commit -qm one
check "a checkout" "$(commit_of "$tmp/repo" "$git")" "[0-9a-f]{12}"
echo b >"$tmp/repo/f"
check "an edited checkout" "$(commit_of "$tmp/repo" "$git")" "[0-9a-f]{12}-dirty"
check "a folder inside a checkout" "$(commit_of "$tmp/repo/sub" "$git")" "unknown"
mkdir "$tmp/plain"
check "a folder without .git" "$(commit_of "$tmp/plain" "$git")" "unknown"
check "no git" "$(commit_of "$tmp/repo" "")" "unknown"
exit $fail
