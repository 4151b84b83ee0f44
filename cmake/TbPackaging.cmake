# Installation and the Debian package (CPack). Included after add_subdirectory(app), so that the
# GUI target `trainbench` exists when it is built (TB_HAVE_GUI).
#
#   cmake --install BUILD [--prefix DIR] [--component cli|gui|data]
#   cd BUILD && cpack -G DEB        -> trainbench_<version>_<arch>.deb
#
# Components: cli (trainbench-cli), gui (trainbench, desktop file, metainfo, icons),
# data (example configs, user documentation). The .deb holds all of them. See packaging/README.md.
include(GNUInstallDirs)

set(_tb_pkg "${PROJECT_SOURCE_DIR}/packaging")
set(_tb_app_id "io.github.trainbench.TrainBench")

# --- executables -------------------------------------------------------------------------------
# trainbench-cli installs itself (app/cli/CMakeLists.txt). The GUI is optional and may not exist.
if(TARGET trainbench)
  install(TARGETS trainbench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT gui)
endif()

# --- desktop integration -----------------------------------------------------------------------
# Only with the GUI: a menu entry or AppStream component for a missing executable would be broken.
if(TARGET trainbench)
  install(FILES "${_tb_pkg}/${_tb_app_id}.desktop"
          DESTINATION ${CMAKE_INSTALL_DATADIR}/applications COMPONENT gui)
  install(FILES "${_tb_pkg}/${_tb_app_id}.metainfo.xml"
          DESTINATION ${CMAKE_INSTALL_DATADIR}/metainfo COMPONENT gui)
  install(FILES "${PROJECT_SOURCE_DIR}/resources/icons/trainbench.svg"
          DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/scalable/apps COMPONENT gui)

  # PNG sizes of the icon, rendered when rsvg-convert (librsvg2-bin) is there; not a build
  # dependency: without it only the scalable icon is installed, which current desktops use.
  find_program(TB_RSVG_CONVERT rsvg-convert DOC "rsvg-convert, to render PNG sizes of the icon (optional)")
  mark_as_advanced(TB_RSVG_CONVERT)
  if(TB_RSVG_CONVERT)
    set(_tb_icon_pngs)
    foreach(_size IN ITEMS 16 24 32 48 64 128 256)
      set(_png "${CMAKE_CURRENT_BINARY_DIR}/icons/${_size}x${_size}/trainbench.png")
      add_custom_command(
        OUTPUT "${_png}"
        COMMAND ${CMAKE_COMMAND} -E make_directory "${CMAKE_CURRENT_BINARY_DIR}/icons/${_size}x${_size}"
        COMMAND "${TB_RSVG_CONVERT}" -w ${_size} -h ${_size} -o "${_png}"
                "${PROJECT_SOURCE_DIR}/resources/icons/trainbench.svg"
        DEPENDS "${PROJECT_SOURCE_DIR}/resources/icons/trainbench.svg"
        COMMENT "Rendering the ${_size}x${_size} application icon"
        VERBATIM)
      list(APPEND _tb_icon_pngs "${_png}")
      install(FILES "${_png}" DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/${_size}x${_size}/apps
              COMPONENT gui)
    endforeach()
    add_custom_target(tb_icon_pngs ALL DEPENDS ${_tb_icon_pngs})
  endif()
endif()

# --- data and documentation --------------------------------------------------------------------
install(DIRECTORY "${PROJECT_SOURCE_DIR}/resources/configs/"
        DESTINATION ${CMAKE_INSTALL_DATADIR}/trainbench/configs COMPONENT data
        FILES_MATCHING PATTERN "*.toml")
install(FILES "${PROJECT_SOURCE_DIR}/docs/user-guide.md" "${PROJECT_SOURCE_DIR}/docs/config-reference.md"
        DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/trainbench COMPONENT data)

# --- checks ------------------------------------------------------------------------------------
# `cmake --build BUILD --target validate-packaging` runs whichever validators are installed
# (appstream, desktop-file-utils); neither is required to build or package.
find_program(TB_APPSTREAMCLI appstreamcli)
find_program(TB_DESKTOP_FILE_VALIDATE desktop-file-validate)
mark_as_advanced(TB_APPSTREAMCLI TB_DESKTOP_FILE_VALIDATE)
set(_tb_validate_cmds)
if(TB_APPSTREAMCLI)
  list(APPEND _tb_validate_cmds COMMAND "${TB_APPSTREAMCLI}" validate --no-net "${_tb_pkg}/${_tb_app_id}.metainfo.xml")
endif()
if(TB_DESKTOP_FILE_VALIDATE)
  list(APPEND _tb_validate_cmds COMMAND "${TB_DESKTOP_FILE_VALIDATE}" "${_tb_pkg}/${_tb_app_id}.desktop")
endif()
if(NOT _tb_validate_cmds)
  set(_tb_validate_cmds COMMAND ${CMAKE_COMMAND} -E echo "validate-packaging: neither appstreamcli nor desktop-file-validate is installed")
endif()
add_custom_target(validate-packaging ${_tb_validate_cmds} COMMENT "Validating the desktop file and AppStream metainfo" VERBATIM)

# --- CPack: the .deb ---------------------------------------------------------------------------
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "trainbench")
set(CPACK_PACKAGE_VENDOR "TrainBench developers")
set(CPACK_PACKAGE_CONTACT "TrainBench developers <dev@trainbench.invalid>")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "workbench for training neural networks")
set(CPACK_PACKAGE_CHECKSUM SHA256)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${CPACK_PACKAGE_CONTACT}")
set(CPACK_DEBIAN_PACKAGE_SECTION "science")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
if(TARGET trainbench)
  set(_tb_contents "\
The package contains the Qt 6 GUI (trainbench), the headless command-line
tool (trainbench-cli) and example run configurations for Fashion-MNIST and a
small language model trained on the fortunes corpus.")
else()
  set(_tb_contents "\
This build contains the headless command-line tool (trainbench-cli) and
example run configurations for Fashion-MNIST and a small language model
trained on the fortunes corpus; it was configured without the Qt 6 GUI.")
endif()
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "\
TrainBench is a desktop workbench for training neural networks: configure a
run (model, optimizer - Muon or AdamW -, learning-rate schedule, mixed
precision, SWA/EMA weight averaging, CPU/NUMA binding), watch loss, learning
rate and step timings live, compare runs side by side and export reports.

The training engine is an in-process C++ library with multi-threaded CPU
kernels (OpenBLAS).

${_tb_contents}")

# Runtime dependencies: computed by dpkg-shlibdeps (dpkg-dev) from the installed executables.
# Without it, the Debian 12 names are given by hand. The CUDA backend is optional and never a
# dependency of the package. The example configs read these data sets:
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "fortunes, dataset-fashion-mnist")
if(TB_HAVE_MPI)
  # trainbench-cli launch --ddp runs mpirun.
  string(APPEND CPACK_DEBIAN_PACKAGE_RECOMMENDS ", openmpi-bin")
endif()
find_program(TB_DPKG_SHLIBDEPS dpkg-shlibdeps)
mark_as_advanced(TB_DPKG_SHLIBDEPS)
if(TB_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  message(STATUS "Packaging: dpkg-shlibdeps not found (dpkg-dev); the .deb gets fixed Debian 12 dependencies")
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
  set(_tb_depends libopenblas0 libsqlite3-0 libhwloc15 libnuma1 zlib1g libtomlplusplus3 libpng16-16
      libjpeg62-turbo libsentencepiece0 libicu72)
  if(TB_HAVE_MPI)
    list(APPEND _tb_depends libopenmpi3)
  endif()
  if(TARGET trainbench)
    list(APPEND _tb_depends libqt6widgets6 libqt6printsupport6 libqt6svg6 libqcustomplot2.1-qt6)
  endif()
  list(JOIN _tb_depends ", " CPACK_DEBIAN_PACKAGE_DEPENDS)
endif()

# `package_source` (or cpack --config CPackSourceConfig.cmake): the tracked sources, not builds.
set(CPACK_SOURCE_GENERATOR "TXZ")
set(CPACK_SOURCE_PACKAGE_FILE_NAME "trainbench-${PROJECT_VERSION}")
set(CPACK_SOURCE_IGNORE_FILES "/build/" "/\\\\.git/" "/\\\\.cache/" "/\\\\.device/" "/\\\\.gl/" "/\\\\.whl/" "\\\\.swp$")

include(CPack)
