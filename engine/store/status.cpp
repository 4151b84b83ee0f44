// Run status and event level names.
#include "engine/store/status.h"

#include <array>
#include <string>

#include "engine/core/error.h"

namespace tb::store {
namespace {

constexpr std::array<std::string_view, 7> kStatusNames = {
    "queued", "running", "finished", "failed", "diverged", "cancelled", "crashed"};
constexpr std::array<std::string_view, 3> kLevelNames = {"info", "warning", "error"};

}  // namespace

std::string_view to_string(RunStatus status) noexcept {
  return kStatusNames[static_cast<std::size_t>(status)];
}

RunStatus run_status_from_string(std::string_view text) {
  for (std::size_t i = 0; i < kStatusNames.size(); ++i) {
    if (kStatusNames[i] == text) return static_cast<RunStatus>(i);
  }
  throw ValueError(detail::str_cat("[store] unknown run status '", text,
                                   "'; expected one of queued, running, finished, failed, "
                                   "diverged, cancelled, crashed"));
}

bool is_terminal(RunStatus status) noexcept {
  return status != RunStatus::kQueued && status != RunStatus::kRunning;
}

bool is_allowed_transition(RunStatus from, RunStatus to) noexcept {
  if (from == to) return false;
  switch (from) {
    case RunStatus::kQueued:
      // crashed: the process that created it ended before the run started (set-up killed).
      return to == RunStatus::kRunning || to == RunStatus::kCancelled || to == RunStatus::kFailed ||
             to == RunStatus::kCrashed;
    case RunStatus::kRunning:
      return is_terminal(to);
    default:
      return to == RunStatus::kRunning;
  }
}

std::string_view to_string(EventLevel level) noexcept {
  return kLevelNames[static_cast<std::size_t>(level)];
}

EventLevel event_level_from_string(std::string_view text) {
  for (std::size_t i = 0; i < kLevelNames.size(); ++i) {
    if (kLevelNames[i] == text) return static_cast<EventLevel>(i);
  }
  throw ValueError(detail::str_cat("[store] unknown event level '", text,
                                   "'; expected one of info, warning, error"));
}

}  // namespace tb::store
