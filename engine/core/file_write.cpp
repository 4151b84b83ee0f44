#include "engine/core/file_write.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <system_error>

#include "engine/core/error.h"

namespace tb::core {

namespace {
[[noreturn]] void cannot_write(const std::filesystem::path& file, std::string_view tag,
                               const std::string& why) {
  throw ValueError("[" + std::string(tag) + "] cannot write " + file.string() + ": " + why);
}
}  // namespace

std::filesystem::path write_beside(const std::filesystem::path& file, std::string_view bytes,
                                   std::string_view tag) {
  const std::filesystem::path tmp = file.string() + ".tmp";
  errno = 0;
  std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f) {
    const int why = errno;  // before remove(), which may set it
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    cannot_write(file, tag, why != 0 ? std::strerror(why) : "a write failed (a full disk?)");
  }
  return tmp;
}

void put_in_place(const std::filesystem::path& tmp, const std::filesystem::path& file,
                  std::string_view tag) {
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    cannot_write(file, tag, why);
  }
}

void write_whole(const std::filesystem::path& file, std::string_view bytes, std::string_view tag) {
  put_in_place(write_beside(file, bytes, tag), file, tag);
}

}  // namespace tb::core
