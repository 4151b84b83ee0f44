# Build-time check: the engine must never include a Qt header (run with -DENGINE_DIR=...).
file(GLOB_RECURSE tb_engine_files
  "${ENGINE_DIR}/*.h" "${ENGINE_DIR}/*.hpp" "${ENGINE_DIR}/*.cpp" "${ENGINE_DIR}/*.cu" "${ENGINE_DIR}/*.cuh")
set(tb_offenders "")
foreach(f IN LISTS tb_engine_files)
  file(STRINGS "${f}" tb_lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]Q")
  if(tb_lines)
    list(APPEND tb_offenders "${f}: ${tb_lines}")
  endif()
endforeach()
if(tb_offenders)
  list(JOIN tb_offenders "\n  " tb_msg)
  message(FATAL_ERROR "engine/ must not include Qt headers (the engine is Qt-free):\n  ${tb_msg}")
endif()
