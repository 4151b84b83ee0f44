# Third-party dependencies, all from Debian packages (see packaging/debian-build-deps.txt).
find_package(PkgConfig REQUIRED)

# An AUTO/ON/OFF cache setting VAR (default AUTO) with DOC; sets <out_required> to REQUIRED (ON),
# QUIET (AUTO) or OFF (OFF) for the find_package calls that follow.
function(tb_auto_option var doc out_required)
  set(${var} "AUTO" CACHE STRING "${doc}")
  set_property(CACHE ${var} PROPERTY STRINGS AUTO ON OFF)
  if(${var} STREQUAL "ON")
    set(${out_required} REQUIRED PARENT_SCOPE)
  elseif(${var} STREQUAL "OFF")
    set(${out_required} OFF PARENT_SCOPE)
  else()
    set(${out_required} QUIET PARENT_SCOPE)
  endif()
endfunction()
find_package(Threads REQUIRED)

pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
# oneDNN's matmul for the CPU's float GEMMs (engine/backends/cpu/onednn_gemm.cpp). AUTO uses it
# when Debian's libdnnl-dev is installed (its CMake package needs ocl-icd-opencl-dev for OpenCL);
# OpenMP is linked to keep oneDNN's own OpenMP threads at one per call.
tb_auto_option(TB_ONEDNN "Use oneDNN for CPU float GEMMs: AUTO (when found), ON, OFF" _tb_dnnl_required)
set(TB_HAVE_ONEDNN OFF)
if(_tb_dnnl_required)
  find_package(dnnl 2.6 CONFIG ${_tb_dnnl_required})
  find_package(OpenMP ${_tb_dnnl_required} COMPONENTS CXX)
  if(dnnl_FOUND AND OpenMP_CXX_FOUND)
    set(TB_HAVE_ONEDNN ON)
  elseif(TB_ONEDNN STREQUAL "AUTO")
    message(STATUS "oneDNN: not used (libdnnl-dev, ocl-icd-opencl-dev or OpenMP missing)")
  endif()
endif()
# Open MPI for distributed data-parallel training on CPUs (engine/dist/mpi_group.cpp). AUTO uses
# it when Debian's libopenmpi-dev is installed; without it the "mpi" backend reports so.
tb_auto_option(TB_MPI "Distributed training over MPI: AUTO (when found), ON, OFF" _tb_mpi_required)
set(TB_HAVE_MPI OFF)
if(_tb_mpi_required)
  # The C API, called from C++ (the project enables no C compiler; MPI's C++ bindings are not
  # used).
  set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "Skip MPI's deprecated C++ bindings")
  find_package(MPI ${_tb_mpi_required} COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(TB_HAVE_MPI ON)
  elseif(TB_MPI STREQUAL "AUTO")
    message(STATUS "MPI: not used (libopenmpi-dev missing)")
  endif()
endif()
# CPU topology (engine/numa): hwloc for the machine model, libnuma for memory policy/placement.
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
pkg_check_modules(NUMA REQUIRED IMPORTED_TARGET numa)
find_package(nlohmann_json 3.10 REQUIRED)
# Gzip-compressed IDX files of Fashion-MNIST (engine/data).
find_package(ZLIB REQUIRED)
# Image folders (engine/data/image_decode): PNG and JPEG files.
find_package(PNG REQUIRED)
find_package(JPEG REQUIRED)
# Text through a SentencePiece model (engine/data/tokenizer): the processor and its trainer
# (trainbench-cli tokenizer train); the .pc file names only the processor's library.
pkg_check_modules(SENTENCEPIECE REQUIRED IMPORTED_TARGET sentencepiece)
find_library(TB_SENTENCEPIECE_TRAIN_LIB sentencepiece_train HINTS ${SENTENCEPIECE_LIBRARY_DIRS}
  REQUIRED)
# GPT-2's byte-level BPE (engine/data/gpt2_bpe): Unicode character classes.
find_package(ICU REQUIRED COMPONENTS uc)
find_package(CLI11 REQUIRED)
# The run store (engine/store) uses the SQLite 3 C API.
find_package(SQLite3 REQUIRED)
# Run configs (engine/train/run_config) are TOML, read with toml++.
pkg_check_modules(TOMLPP REQUIRED IMPORTED_TARGET tomlplusplus)

if(TB_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(TB_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

# The GUI (ui/, app/gui): Qt 6 Widgets/PrintSupport/Svg/Test and QCustomPlot (Debian's
# libqcustomplot-dev, target QCustomPlotQt6). AUTO builds it when they are found, so
# trainbench-cli still builds on a headless box without Qt; the ci preset asks for ON.
tb_auto_option(TB_GUI "Build the Qt 6 GUI: AUTO (when Qt 6 + QCustomPlot are found), ON, OFF" _tb_qt_required)
set(TB_HAVE_GUI OFF)
if(_tb_qt_required)
  find_package(Qt6 6.2 ${_tb_qt_required} COMPONENTS Widgets PrintSupport Svg Test)
  find_package(QCustomPlotQt6 ${_tb_qt_required})
  if(Qt6_FOUND AND QCustomPlotQt6_FOUND)
    set(TB_HAVE_GUI ON)
  elseif(TB_GUI STREQUAL "AUTO")
    message(STATUS "GUI: not built (Qt 6 Widgets/PrintSupport/Svg/Test or QCustomPlotQt6 missing)")
  endif()
endif()
