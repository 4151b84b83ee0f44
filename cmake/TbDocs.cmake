# 'docs' target: the API reference with Doxygen, warnings as errors.
find_package(Doxygen)
if(DOXYGEN_FOUND)
  set(TB_DOXYFILE_IN "${CMAKE_SOURCE_DIR}/docs/Doxyfile.in")
  set(TB_DOXYFILE "${CMAKE_BINARY_DIR}/Doxyfile")
  configure_file(${TB_DOXYFILE_IN} ${TB_DOXYFILE} @ONLY)
  add_custom_target(docs
    COMMAND ${DOXYGEN_EXECUTABLE} ${TB_DOXYFILE}
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
    COMMENT "Building the API reference with Doxygen (warnings are errors)"
    VERBATIM)
else()
  add_custom_target(docs COMMAND ${CMAKE_COMMAND} -E echo "doxygen not found: install the 'doxygen' package" COMMAND ${CMAKE_COMMAND} -E false)
endif()
