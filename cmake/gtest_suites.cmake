# parity_add_gtest_suites(TARGET LABELS l... [TIMEOUT s]): one CTest test per GoogleTest suite
# of TARGET, found after each build by listing its tests (cmake/gtest_suites_list.cmake).
#
# Why not gtest_discover_tests: it makes one process per test, and every process start maps
# LibTorch (about 0.5 s of CPU with 1.13, more with 2.11 and under ASan): with 460 tests the
# `unit` label spent more time starting processes than testing. A suite is one process; its
# tests run in order, as in a plain `parity_tests` run. A suite counts as SKIPPED only when it
# exited 0 and none of its tests passed (every test skipped: cmake/gtest_suite_run.sh); a
# failing suite is a failure even when it has one test; a partly skipped suite prints each
# "[  SKIPPED ]" test in its output.
#
# PARITY_GTEST_SHARDS=N (N > 0; the default preset sets 6, sanitize and torch2 4) makes N CTest
# tests TARGET.shard-I-of-N instead, GoogleTest's own sharding (GTEST_TOTAL_SHARDS/
# GTEST_SHARD_INDEX): a process start costs about 0.5 s with LibTorch 1.13, 1.4 s under ASan and
# more with LibTorch 2.11's CUDA libraries, so 125 suite processes were a large share of the
# label's CPU time (docs/benchmarks.md). Configure with -DPARITY_GTEST_SHARDS=0 for one CTest
# test per suite; one suite alone: build/default/tests/parity_tests --gtest_filter='Suite.*'.
set(PARITY_GTEST_SHARDS 0 CACHE STRING
  "0: one CTest test per GoogleTest suite; N > 0: N shards of each GoogleTest executable")
function(parity_add_gtest_suites target)
  cmake_parse_arguments(A "" "TIMEOUT" "LABELS" ${ARGN})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 600)
  endif()
  set(list_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake")
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake")
  string(REPLACE ";" "," labels "${A_LABELS}")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -D "EXE=$<TARGET_FILE:${target}>" -D "OUT=${list_file}"
      -D "LABELS=${labels}" -D "TIMEOUT=${A_TIMEOUT}" -D "WORKDIR=${CMAKE_CURRENT_BINARY_DIR}"
      -D "SHARDS=${PARITY_GTEST_SHARDS}" -D "TARGET=${target}"
      -D "RUNNER=${PROJECT_SOURCE_DIR}/cmake/gtest_suite_run.sh"
      -P "${PROJECT_SOURCE_DIR}/cmake/gtest_suites_list.cmake"
    BYPRODUCTS "${list_file}"
    VERBATIM)
  # CTest reads this at test time; before the first build it names the missing list.
  file(WRITE "${include_file}"
    "if(EXISTS \"${list_file}\")\n"
    "  include(\"${list_file}\")\n"
    "else()\n"
    "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\n"
    "endif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()
