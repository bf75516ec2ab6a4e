# Script mode (cmake -P), run after each build of a GoogleTest executable by
# parity_add_gtest_suites (cmake/gtest_suites.cmake): writes OUT, one add_test per suite.
# Inputs: EXE, OUT, LABELS (comma-separated), TIMEOUT, WORKDIR, RUNNER (gtest_suite_run.sh: a
# suite is skipped only when it exited 0 with every test skipped, never when one failed),
# SHARDS and TARGET (SHARDS > 0: SHARDS tests TARGET.shard-I-of-SHARDS instead of one per suite).
execute_process(COMMAND "${EXE}" --gtest_list_tests
  WORKING_DIRECTORY "${WORKDIR}"
  OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE rc TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} --gtest_list_tests failed (${rc}): ${errors}")
endif()
string(REPLACE "," ";" labels "${LABELS}")
# Suite lines start in column 0 and end in "." (before an optional "  # TypeParam = ..."
# comment); test lines are indented. Semicolons would split CMake list items: drop them.
string(REPLACE ";" "" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(content "")
set(count 0)
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ #][^ ]*)\\.( |$)")
    set(suite "${CMAKE_MATCH_1}")
    string(APPEND content
      "add_test([=[${suite}]=] bash [=[${RUNNER}]=] [=[${EXE}]=] [=[--gtest_filter=${suite}.*]=])\n"
      "set_tests_properties([=[${suite}]=] PROPERTIES LABELS [=[${labels}]=] TIMEOUT ${TIMEOUT}"
      " WORKING_DIRECTORY [=[${WORKDIR}]=] SKIP_RETURN_CODE 77)\n")
    math(EXPR count "${count} + 1")
  endif()
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${EXE} lists no test suites")
endif()
if(SHARDS GREATER 0)
  set(content "")
  math(EXPR last "${SHARDS} - 1")
  foreach(i RANGE ${last})
    set(name "${TARGET}.shard-${i}-of-${SHARDS}")
    string(APPEND content
      "add_test([=[${name}]=] bash [=[${RUNNER}]=] [=[${EXE}]=])\n"
      "set_tests_properties([=[${name}]=] PROPERTIES LABELS [=[${labels}]=] TIMEOUT ${TIMEOUT}"
      " WORKING_DIRECTORY [=[${WORKDIR}]=] SKIP_RETURN_CODE 77"
      " ENVIRONMENT [=[GTEST_TOTAL_SHARDS=${SHARDS};GTEST_SHARD_INDEX=${i}]=])\n")
  endforeach()
endif()
file(WRITE "${OUT}.partial" "${content}")
file(RENAME "${OUT}.partial" "${OUT}")
