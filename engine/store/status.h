// Run status and event level vocabularies of the run store, with their stored spellings.
#pragma once

#include <string_view>

namespace tb::store {

/// Lifecycle state of a run. Stored as its lower-case name (to_string) in runs.status.
enum class RunStatus {
  kQueued,     ///< created, not started yet
  kRunning,    ///< a writer process is (or was, see kCrashed) logging to it
  kFinished,   ///< ended normally
  kFailed,     ///< ended by an error (the message says which)
  kDiverged,   ///< ended because the loss stayed non-finite
  kCancelled,  ///< stopped by the user
  kCrashed,    ///< its writing process disappeared while it was running (found on open)
};

/// The stored name of `status`: "queued", "running", "finished", "failed", "diverged",
/// "cancelled" or "crashed".
std::string_view to_string(RunStatus status) noexcept;

/// Parses a stored name (exact, lower case). Throws tb::ValueError naming the text and the valid
/// names when it is none of them.
RunStatus run_status_from_string(std::string_view text);

/// True for the statuses a run ends in: finished, failed, diverged, cancelled, crashed.
bool is_terminal(RunStatus status) noexcept;

/// Whether a run may go from `from` to `to`: queued -> running|cancelled|failed|crashed;
/// running -> any terminal status; a terminal status -> running (resume). Nothing else, and
/// never to the same status.
bool is_allowed_transition(RunStatus from, RunStatus to) noexcept;

/// Severity of an event (a line in the run's log). Stored as "info", "warning" or "error".
enum class EventLevel { kInfo, kWarning, kError };

/// The stored name of `level`.
std::string_view to_string(EventLevel level) noexcept;

/// Parses a stored event level name; throws tb::ValueError for any other text.
EventLevel event_level_from_string(std::string_view text);

}  // namespace tb::store
