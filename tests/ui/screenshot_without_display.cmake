# trainbench --screenshot without a display (documentation, a bug report from a server): the
# window at its first-start size, 1720 x 950, not the offscreen platform's made-up 800 x 800
# screen, which squeezed the plots.
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")
# No display, and no saved window geometry of the person running the tests.
unset(ENV{DISPLAY})
unset(ENV{WAYLAND_DISPLAY})
unset(ENV{QT_QPA_PLATFORM})
set(ENV{XDG_CONFIG_HOME} "${WORK}/config")
execute_process(COMMAND "${GUI}" --db "${WORK}/runs.sqlite" --screenshot "${WORK}/window.png"
                        --screenshot-delay 300
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "trainbench --screenshot failed (${rc}): ${out} ${err}")
endif()
# A PNG's IHDR: width and height, big-endian, at bytes 16..23.
file(READ "${WORK}/window.png" size OFFSET 16 LIMIT 8 HEX)
if(NOT size STREQUAL "000006b8000003b6")  # 1720, 950
  message(FATAL_ERROR "window.png is not 1720 x 950 (IHDR size bytes ${size})")
endif()
