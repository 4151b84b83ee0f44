# Merges one CPU capability level's kernel objects into a single relocatable object whose
# functions are local to it, except the level's entry point (KEEP, a substring of its symbol).
#
# The level's files are compiled with extra instructions (-mavx2, -mavx512f, ...), and so are the
# inline and template functions they use from headers. Left global, those copies are weak
# definitions the final link merges with the baseline's copies of the same functions, keeping one
# of them for the whole program: a baseline caller could run AVX-512 code on a CPU without it.
# `ld -r --force-group-allocation` resolves the level's calls among its own copies and dissolves
# the COMDAT groups; `objcopy --localize-symbols` then hides its functions and vtables. Data
# symbols (the static variables of inline functions, guard variables, type information) stay
# global, and weak (dissolving a group made them strong), so there is still one of each in the
# program.
#
# The level's code must not run before the level is chosen, so a static initializer in it is an
# error here.
#
# Inputs: LD, NM, OBJCOPY, OBJECTS (|-separated), OUTPUT, KEEP.
string(REPLACE "|" ";" objects "${OBJECTS}")
set(partial "${OUTPUT}.partial.o")
execute_process(COMMAND ${LD} -r --force-group-allocation -o ${partial} ${objects}
  RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ld -r failed for ${OUTPUT}: ${err}")
endif()
execute_process(COMMAND ${NM} --defined-only ${partial} OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "nm failed on ${partial}")
endif()
string(REPLACE "\n" ";" lines "${syms}")
set(localize "")
set(weaken "")
set(found_keep FALSE)
foreach(line IN LISTS lines)
  if(NOT line MATCHES "^[0-9a-fA-F]+ ([A-Za-z]) (.+)$")
    continue()
  endif()
  set(type "${CMAKE_MATCH_1}")
  set(name "${CMAKE_MATCH_2}")
  if(name MATCHES "^_GLOBAL__sub_I")
    message(FATAL_ERROR "${OUTPUT}: ${name} is a static initializer; the per-level kernel files "
                        "must not run code before the level is chosen")
  endif()
  if(name MATCHES "${KEEP}")
    set(found_keep TRUE)
    continue()
  endif()
  if(type MATCHES "^[TWi]$" OR (type MATCHES "^[VDR]$" AND name MATCHES "^_ZT[VTC]"))
    string(APPEND localize "${name}\n")
  elseif(type MATCHES "^[BDRGSVu]$")
    string(APPEND weaken "${name}\n")
  endif()
endforeach()
if(NOT found_keep)
  message(FATAL_ERROR "${OUTPUT}: no symbol matching '${KEEP}' (the level's entry point)")
endif()
file(WRITE "${OUTPUT}.localize.txt" "${localize}")
file(WRITE "${OUTPUT}.weaken.txt" "${weaken}")
execute_process(COMMAND ${OBJCOPY} --localize-symbols=${OUTPUT}.localize.txt
  --weaken-symbols=${OUTPUT}.weaken.txt ${partial} ${OUTPUT}
  RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "objcopy failed for ${OUTPUT}: ${err}")
endif()
file(REMOVE ${partial})
