# The size limits a newcomer can rely on: no source file in engine/, app/ or ui/ over
# MAX_LINES (800) lines, and the trainer's constructor and step loop (Trainer::Trainer,
# Trainer::loop in engine/train/) each under MAX_FUNCTION_LINES (80) lines, so that the run's
# structure reads at a glance and its parts live in functions with names.
#   cmake -DROOT=<source dir> [-DMAX_LINES=800] [-DMAX_FUNCTION_LINES=80] -P CheckSourceLimits.cmake
# Prints every breach and fails when there is one.
if(NOT ROOT)
  message(FATAL_ERROR "CheckSourceLimits.cmake: give -DROOT=<source dir>")
endif()
if(NOT MAX_LINES)
  set(MAX_LINES 800)
endif()
if(NOT MAX_FUNCTION_LINES)
  set(MAX_FUNCTION_LINES 80)
endif()

set(problems "")
set(checked 0)
foreach(dir engine app ui)
  file(GLOB_RECURSE files LIST_DIRECTORIES false
    "${ROOT}/${dir}/*.cpp" "${ROOT}/${dir}/*.h" "${ROOT}/${dir}/*.cu" "${ROOT}/${dir}/*.cuh")
  foreach(f IN LISTS files)
    math(EXPR checked "${checked} + 1")
    # Lines counted by their ends (file(STRINGS) would skip the empty ones).
    file(READ "${f}" text)
    string(REGEX MATCHALL "\n" ends "${text}")
    list(LENGTH ends n)
    if(n GREATER MAX_LINES)
      file(RELATIVE_PATH rel "${ROOT}" "${f}")
      list(APPEND problems "${rel}: ${n} lines (at most ${MAX_LINES}: split it by concern)")
    endif()
  endforeach()
endforeach()

# A function's length: from the line that opens its definition to the first line that is a
# lone "}" after it (the definitions here are at namespace level, formatted by clang-format).
function(function_lines file opener out)
  file(READ "${file}" text)
  string(FIND "${text}" "${opener}" at)
  if(at EQUAL -1)
    set(${out} -1 PARENT_SCOPE)
    return()
  endif()
  string(SUBSTRING "${text}" ${at} -1 rest)
  string(FIND "${rest}" "\n}\n" end)
  string(SUBSTRING "${rest}" 0 ${end} body)
  string(REGEX MATCHALL "\n" ends "${body}")
  list(LENGTH ends n)
  math(EXPR n "${n} + 1")  # (the opener starts with the line end before it) the closing line
  set(${out} ${n} PARENT_SCOPE)
endfunction()

file(GLOB trainer_files "${ROOT}/engine/train/*.cpp")
foreach(fn "Trainer::Trainer(" "TrainResult Trainer::loop(")
  set(found FALSE)
  foreach(f IN LISTS trainer_files)
    function_lines("${f}" "\n${fn}" n)
    if(n GREATER -1)
      set(found TRUE)
      if(NOT n LESS MAX_FUNCTION_LINES)
        file(RELATIVE_PATH rel "${ROOT}" "${f}")
        list(APPEND problems
          "${rel}: ${fn}...) is ${n} lines (under ${MAX_FUNCTION_LINES}: give its parts names)")
      endif()
    endif()
  endforeach()
  if(NOT found)
    list(APPEND problems "engine/train/: no definition of ${fn}...) found")
  endif()
endforeach()

if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "source size limits:\n  ${text}")
endif()
message(STATUS "source size limits hold: ${checked} files of engine/, app/ and ui/ within "
               "${MAX_LINES} lines; Trainer::Trainer and Trainer::loop under ${MAX_FUNCTION_LINES}")
