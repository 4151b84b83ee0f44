# Third-party dependencies, all from Debian packages (see packaging/debian-build-deps.txt).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
# CPU topology (engine/numa): hwloc for the machine model, libnuma for memory policy/placement.
pkg_check_modules(HWLOC REQUIRED IMPORTED_TARGET hwloc)
pkg_check_modules(NUMA REQUIRED IMPORTED_TARGET numa)
find_package(nlohmann_json 3.10 REQUIRED)
# Gzip-compressed IDX files of Fashion-MNIST (engine/data).
find_package(ZLIB REQUIRED)
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
