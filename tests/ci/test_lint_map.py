#!/usr/bin/env python3
"""`ci/lint map`'s own test (CTest ci.lint_map): a small tree of three rooms, first as its map
says, then with one disagreement at a time, each of which must fail with a line that names the
room and the difference. Needs git and python3 only.

Usage: test_lint_map.py SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1])
FILES = {
    "ci/floors.txt": "harness/base\nharness/low\nharness/high\n",
    "docs/architecture.md": """# Architecture

| room | folder | holds | may include |
|---|---|---|---|
| high | `harness/high/` | the top | low, base |
| low | `harness/low/` | the middle | base |
| base | `harness/base/` | the bottom | — |
""",
    "harness/base/CMakeLists.txt": "parity_room(parity_base harness/base files.cpp)\n",
    "harness/base/files.h": "#pragma once\n",
    "harness/base/files.cpp": '#include "harness/base/files.h"\n',
    "harness/low/CMakeLists.txt": "parity_room(parity_low harness/low low.cpp)\n"
                                  "target_link_libraries(parity_low PUBLIC parity_base)\n",
    "harness/low/low.h": '#pragma once\n#include "harness/base/files.h"\n',
    "harness/low/low.cpp": '#include "harness/low/low.h"\n',
    "harness/high/CMakeLists.txt": "# the top room\nparity_room(parity_high harness/high high.cpp)\n"
                                   "target_link_libraries(parity_high\n"
                                   "  PUBLIC parity_low\n  PRIVATE parity_base)\n",
    "harness/high/high.h": '#pragma once\n#include "harness/low/low.h"\n',
    "harness/high/high.cpp": '#include "harness/high/high.h"\n#include "harness/base/files.h"\n',
}
for room in ("base", "low", "high"):
    FILES[f"harness/{room}/README.md"] = f"# harness/{room}/\n"

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL: " + message)


def lint_map(tree):
    r = subprocess.run([os.path.join(tree, "ci", "lint"), "map"], capture_output=True, text=True)
    return r.returncode, r.stdout


def write(tree, path, text):
    os.makedirs(os.path.dirname(os.path.join(tree, path)), exist_ok=True)
    with open(os.path.join(tree, path), "w") as f:
        f.write(text)


# (what changes, {path: new text or None to delete}, words the one finding line must hold)
CASES = [
    ("an include of a room the library does not declare",
     {"harness/low/low.cpp": '#include "harness/low/low.h"\n#include "harness/high/high.h"\n'},
     ["harness/low/low.cpp:2", "room low includes room high", "parity_low does not declare"]),
    ("a declared room no file includes",
     {"harness/high/high.cpp": '#include "harness/high/high.h"\n'},
     ["room high", "parity_high declares room base", "no file"]),
    ("a room a header includes, declared PRIVATE",
     {"harness/high/CMakeLists.txt": "parity_room(parity_high harness/high high.cpp)\n"
                                     "target_link_libraries(parity_high PRIVATE parity_low "
                                     "parity_base)\n"},
     ["harness/high/high.h:2", "room high", "room low", "PRIVATE", "make it PUBLIC"]),
    ("a PUBLIC room only .cpp files include",
     {"harness/high/CMakeLists.txt": "parity_room(parity_high harness/high high.cpp)\n"
                                     "target_link_libraries(parity_high PUBLIC parity_low "
                                     "parity_base)\n"},
     ["room high", "room base PUBLIC", "make it PRIVATE"]),
    ("the table lists a room the library does not declare, and lacks one it does",
     {"docs/architecture.md": FILES["docs/architecture.md"].replace("| the top | low, base |",
                                                                    "| the top | low |")},
     ["docs/architecture.md:5", "room high may include", "base: declared by parity_high, not in "
      "the table"]),
    ("a room missing from the table",
     {"docs/architecture.md": FILES["docs/architecture.md"].replace(
         "| low | `harness/low/` | the middle | base |\n", "")},
     ["room low", "not in the room table"]),
    ("a room without a library",
     {"harness/low/CMakeLists.txt": "# no library\n"},
     ["room low has no library"]),
    ("a room without a README.md",
     {"harness/base/README.md": None},
     ["harness/base/README.md", "room base has no README.md"]),
    ("a room of the floors without a folder",
     {"ci/floors.txt": "harness/base\nharness/low\nharness/high\nharness/gone\n"},
     ["room gone", "no folder harness/gone/"]),
]

with tempfile.TemporaryDirectory() as tree:
    os.makedirs(os.path.join(tree, "ci"))
    shutil.copy(os.path.join(ROOT, "ci", "lint"), os.path.join(tree, "ci", "lint"))
    for path, text in FILES.items():
        write(tree, path, text)
    subprocess.run(["git", "init", "-q", tree], check=True)
    code, out = lint_map(tree)
    check(code == 0 and out == "", f"the tree as its map says: exit {code}, output {out!r}")
    for what, changes, words in CASES:
        for path, text in changes.items():
            if text is None:
                os.remove(os.path.join(tree, path))
            else:
                write(tree, path, text)
        code, out = lint_map(tree)
        lines = out.splitlines()
        check(code == 1, f"{what}: exit {code}, not 1")
        check(any(all(w in line for w in words) for line in lines),
              f"{what}: no line holds {words}: {out!r}")
        for path in changes:
            write(tree, path, FILES[path])
        code, out = lint_map(tree)
        check(code == 0, f"after undoing '{what}': exit {code}: {out!r}")

print(f"{len(CASES)} cases, {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
