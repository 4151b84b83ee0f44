# trainbench --export-report, as a user runs it: train a run with trainbench-cli into a fresh
# store, export its report as HTML and PDF without a display, and check the files.
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
set(ENV{QT_QPA_PLATFORM} "")
execute_process(COMMAND "${CLI}" --db "${WORK}/runs.sqlite" run "${CONFIG}" RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "trainbench-cli run failed (${rc})")
endif()
execute_process(COMMAND "${GUI}" --db "${WORK}/runs.sqlite" --export-report 1 -o "${WORK}/report.html"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "trainbench --export-report failed (${rc}): ${out} ${err}")
endif()
file(READ "${WORK}/report.html" html)
foreach(needle "report &lt;b&gt;demo&lt;/b&gt;" "data:image/png;base64," "data-run=\"1\"")
  string(FIND "${html}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "report.html lacks '${needle}'")
  endif()
endforeach()
string(FIND "${html}" "<b>demo" raw)
if(NOT raw EQUAL -1)
  message(FATAL_ERROR "report.html holds the run name unescaped")
endif()
execute_process(COMMAND "${GUI}" --db "${WORK}/runs.sqlite" --export-report 1 -o "${WORK}/report.pdf" RESULT_VARIABLE rc)
file(READ "${WORK}/report.pdf" head LIMIT 5 HEX)
if(NOT rc EQUAL 0 OR NOT head STREQUAL "255044462d")  # "%PDF-"
  message(FATAL_ERROR "trainbench --export-report -o report.pdf did not write a PDF (${rc})")
endif()
# A run that does not exist: non-zero exit and a message naming it.
execute_process(COMMAND "${GUI}" --db "${WORK}/runs.sqlite" --export-report 42 -o "${WORK}/x.html"
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "42")
  message(FATAL_ERROR "--export-report 42 should fail naming run 42: ${rc} ${err}")
endif()
# A mistyped --db: the error says no store is there, and none is created.
execute_process(COMMAND "${GUI}" --db "${WORK}/nothere/runs.sqlite" --export-report 1
                        -o "${WORK}/y.html" RESULT_VARIABLE rc ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "no run store there" OR EXISTS "${WORK}/nothere")
  message(FATAL_ERROR "--export-report with a --db where no store is should fail and create "
                      "nothing: ${rc} ${err}")
endif()
message(STATUS "report.html and report.pdf written")
