// Statements shared by RunStore and RunWriter: status changes and events, run inside the
// caller's transaction.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "engine/store/database.h"
#include "engine/store/process_info.h"
#include "engine/store/status.h"

namespace tb::store::detail {

/// The status of `run`; throws ValueError "[store] FILE: no run N" when it does not exist.
RunStatus read_status(const Connection& db, std::int64_t run);

/// Appends an event to `run`.
void insert_event(Connection& db, std::int64_t run, double time, EventLevel level,
                  std::string_view text);

/// Moves `run` to `to` (checked with is_allowed_transition; ValueError naming the run and both
/// statuses otherwise) at `time`. Going to running records `writer` (pid, host, start time) and
/// started_at (if unset) and clears ended_at and the message; a terminal status sets ended_at
/// and the message. Adds an event describing the change. Call inside a transaction.
void change_status(Connection& db, std::int64_t run, RunStatus to, std::string_view message,
                   double time, const ProcessIdentity* writer = nullptr);

/// The runs table's tags column: a JSON array of strings.
std::string tags_to_json(const std::vector<std::string>& tags);

/// Throws ValueError naming `db` unless `name` is one line of text (no control character).
void check_run_name(const std::filesystem::path& db, std::string_view name);

}  // namespace tb::store::detail
