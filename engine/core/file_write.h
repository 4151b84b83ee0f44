// Files written whole or not at all: beside their place ("FILE.tmp"), then renamed over it, so a
// full disk or a killed process never leaves a cut file under the real name nor loses the old
// one, and a failure says the system's reason.
#pragma once

#include <filesystem>
#include <string_view>

namespace tb::core {

/// Writes `bytes` to "FILE.tmp" beside `file` and returns that path. On failure nothing is left
/// and a tb::ValueError "[TAG] cannot write FILE: REASON" is thrown.
std::filesystem::path write_beside(const std::filesystem::path& file, std::string_view bytes,
                                   std::string_view tag);
/// Renames `tmp` (from write_beside) over `file`; on failure removes `tmp` and throws as above.
void put_in_place(const std::filesystem::path& tmp, const std::filesystem::path& file,
                  std::string_view tag);
/// write_beside, then put_in_place: `file` is whole, or unchanged.
void write_whole(const std::filesystem::path& file, std::string_view bytes, std::string_view tag);

}  // namespace tb::core
