// The identity of a process (pid, host, start time) that the run store records for the writer of
// a running run, and the check that tells whether that process still exists.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace tb::store {

/// Who is writing a run: enough to tell, later and from another process, whether it still runs.
struct ProcessIdentity {
  std::int64_t pid = 0;  ///< process id
  std::string host;      ///< host name (gethostname)
  /// Start time of the process in clock ticks after boot (field 22 of /proc/PID/stat); with the
  /// pid it identifies the process even after the pid is reused.
  std::int64_t start_time = 0;
};

/// The identity of the calling process.
ProcessIdentity current_process();

/// This machine's host name ("" when it cannot be read).
std::string host_name();

/// The start time (field 22 of /proc/<pid>/stat) of process `pid`, or nullopt when there is no
/// such process or it is a zombie (exited, not yet reaped).
std::optional<std::int64_t> process_start_time(std::int64_t pid);

/// Whether the process `who` still runs. Only meaningful when who.host is this host: a process
/// with the pid must exist, not be a zombie, and have the same start time.
bool process_alive(const ProcessIdentity& who);

/// A one-line description of this machine's CPU ("model name" of /proc/cpuinfo and the number of
/// logical CPUs), "" when unknown.
std::string cpu_description();

}  // namespace tb::store
