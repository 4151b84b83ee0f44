// The run store's schema: application id, version, the migration ladder, and opening a database
// file safely (a file that is not ours is refused before anything is written to it).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

#include "engine/store/database.h"

namespace tb::store {

/// PRAGMA application_id of every TrainBench run database: the bytes "TBRS" (TrainBench Run
/// Store). A database with another non-zero id belongs to another application.
inline constexpr std::int32_t kApplicationId = 0x54425253;

/// The schema version (PRAGMA user_version) this build writes. Older versions are migrated on
/// open; newer ones are refused.
inline constexpr int kSchemaVersion = 6;

/// How thoroughly an existing file is checked before use.
enum class IntegrityCheck {
  kNone,   ///< header, application id and version only
  kQuick,  ///< also PRAGMA quick_check (reads every page; O(file size))
};

namespace detail {

/// One rung of the migration ladder: the SQL that takes a database from version to_version - 1
/// to to_version. Rungs run in order, all in one transaction, and user_version is set at the end.
struct Migration {
  int to_version;                ///< version after this rung
  std::string_view description;  ///< what it changes (for error messages)
  std::string_view sql;          ///< statements; run with sqlite3_exec
};

/// The ladder of this build: migrations()[i] takes version i to i + 1 (v0 is the empty file).
std::span<const Migration> migrations();

/// How open_database opens a file.
struct OpenOptions {
  bool read_only = false;                            ///< never write (no create, no migration)
  bool migrate = true;                               ///< bring an older schema up to date
  IntegrityCheck check = IntegrityCheck::kQuick;     ///< checks of an existing file
  int busy_timeout_ms = 5000;                        ///< SQLite busy timeout
  std::span<const Migration> ladder = migrations();  ///< the ladder (tests pass their own)
};

/// Opens (creating it and its directories when absent, unless read-only) the run database at
/// `path`. Unless read-only, the hot journal of a transaction whose process was killed is rolled
/// back first, as SQLite does. An existing file is checked through its header and a read-only
/// connection:
/// not SQLite, corrupted, another application's (other application_id, or tables without ours)
/// or newer than the ladder -> DatabaseRejectedError naming the file, and nothing was written.
/// Then (read-write) WAL journal mode, synchronous=NORMAL, the busy timeout, and the ladder's
/// remaining rungs in one BEGIN IMMEDIATE transaction. With migrate=false an older schema is a
/// StoreError instead.
Connection open_database(const std::filesystem::path& path, const OpenOptions& options);

}  // namespace detail
}  // namespace tb::store
