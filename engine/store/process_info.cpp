// Process identity from /proc: pid, host name and start time.
#include "engine/store/process_info.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace tb::store {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

std::optional<std::int64_t> process_start_time(std::int64_t pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  // Field 2 (comm) is in parentheses and may itself contain spaces or ')': fields after the last
  // ')' are space separated, starting with field 3 (state).
  const auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(line.substr(close + 1));
  std::vector<std::string> fields;
  std::string field;
  while (rest >> field)
    fields.push_back(field);
  if (fields.size() < 20) return std::nullopt;
  if (fields[0] == "Z" || fields[0] == "X") return std::nullopt;  // exited
  try {
    return std::stoll(fields[19]);  // field 22
  } catch (...) {
    return std::nullopt;
  }
}

ProcessIdentity current_process() {
  ProcessIdentity who;
  who.pid = static_cast<std::int64_t>(getpid());
  who.host = host_name();
  who.start_time = process_start_time(who.pid).value_or(0);
  return who;
}

bool process_alive(const ProcessIdentity& who) {
  const auto start = process_start_time(who.pid);
  return start.has_value() && *start == who.start_time;
}

std::string cpu_description() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::string model;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) {
        model = line.substr(line.find_first_not_of(" \t", colon + 1));
      }
      break;
    }
  }
  const unsigned n = std::thread::hardware_concurrency();
  if (model.empty() && n == 0) return "";
  std::ostringstream os;
  os << (model.empty() ? "unknown CPU" : model);
  if (n > 0) os << " (" << n << " logical CPUs)";
  return os.str();
}

}  // namespace tb::store
