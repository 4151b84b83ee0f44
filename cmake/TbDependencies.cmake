# Third-party dependencies, all from Debian packages (see packaging/debian-build-deps.txt).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)

if(TB_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(TB_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
