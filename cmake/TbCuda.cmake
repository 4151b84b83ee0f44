# CUDA detection: TB_CUDA=AUTO enables the CUDA backend when a CUDA compiler is found,
# ON requires it, OFF never builds it. Sets TB_HAVE_CUDA.
# TB_CUDA=EMULATE (the `cuda-emu` test preset) builds the backend without nvcc: its kernels are
# compiled as C++ and run on the CPU emulation of tests/cuda_emu, with an emulated runtime and
# cuBLAS; only the CUDA headers are needed. Sets TB_HAVE_CUDA and TB_CUDA_EMULATION.
set(TB_HAVE_CUDA OFF)
set(TB_CUDA_EMULATION OFF)
if(TB_CUDA STREQUAL "EMULATE")
  find_package(CUDAToolkit REQUIRED)
  set(TB_HAVE_CUDA ON)
  set(TB_CUDA_EMULATION ON)
  message(STATUS "CUDA backend built for the CPU emulation (tests only)")
elseif(NOT TB_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS "/usr/local/cuda/bin/nvcc")
    set(CMAKE_CUDA_COMPILER "/usr/local/cuda/bin/nvcc")
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Ampere and Hopper: keeps CI's compile time sane (see docs/decisions/0003-cuda-build.md).
      set(CMAKE_CUDA_ARCHITECTURES 80 90)
    endif()
    enable_language(CUDA)
    # CMake 3.25 does not know nvcc's C++20 flag; the .cu files need only C++17.
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(TB_HAVE_CUDA ON)
  elseif(TB_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TB_CUDA=ON but no CUDA compiler was found (install the CUDA toolkit or use -DTB_CUDA=AUTO)")
  else()
    message(STATUS "CUDA compiler not found: building without the CUDA backend")
  endif()
endif()
