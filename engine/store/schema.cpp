// Schema v1, the migration ladder and the checks that refuse foreign or broken files.
#include "engine/store/schema.h"

#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace tb::store::detail {
namespace {

using ::tb::detail::str_cat;

// Version 1. Times are Unix seconds (REAL). metrics is clustered on (run_id, key_id, step), so a
// per-run per-key series is one range scan; metric names are interned in metric_keys. A NULL
// value is a NaN (SQLite stores NaN as NULL).
constexpr std::string_view kSchemaV1 = R"sql(
CREATE TABLE runs (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  tags TEXT NOT NULL DEFAULT '[]',
  status TEXT NOT NULL CHECK (status IN
    ('queued', 'running', 'finished', 'failed', 'diverged', 'cancelled', 'crashed')),
  created_at REAL NOT NULL,
  started_at REAL,
  ended_at REAL,
  config TEXT NOT NULL DEFAULT '',
  config_format TEXT NOT NULL DEFAULT '',
  seed INTEGER,
  host TEXT NOT NULL DEFAULT '',
  cpu_info TEXT NOT NULL DEFAULT '',
  gpu_info TEXT NOT NULL DEFAULT '',
  engine_version TEXT NOT NULL DEFAULT '',
  writer_pid INTEGER,
  writer_host TEXT,
  writer_start_time INTEGER,
  last_step INTEGER,
  message TEXT NOT NULL DEFAULT ''
);
CREATE INDEX runs_status ON runs (status);
CREATE TABLE metric_keys (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE
);
CREATE TABLE metrics (
  run_id INTEGER NOT NULL,
  key_id INTEGER NOT NULL,
  step INTEGER NOT NULL,
  value REAL,
  time REAL NOT NULL,
  PRIMARY KEY (run_id, key_id, step)
) WITHOUT ROWID;
CREATE TABLE events (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL,
  time REAL NOT NULL,
  level TEXT NOT NULL CHECK (level IN ('info', 'warning', 'error')),
  text TEXT NOT NULL
);
CREATE INDEX events_run ON events (run_id, id);
CREATE TABLE checkpoints (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL,
  step INTEGER NOT NULL,
  path TEXT NOT NULL,
  created_at REAL NOT NULL,
  metadata TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX checkpoints_run ON checkpoints (run_id, step);
)sql";

// Version 2: the store's identity, a random 64-bit id made once (when the store is created or
// migrated). Checkpoint folders are keyed by it, so stores in one folder never share them.
constexpr std::string_view kSchemaV2 = R"sql(
CREATE TABLE store_info (
  key TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
INSERT INTO store_info (key, value) VALUES ('store_id', lower(hex(randomblob(8))));
)sql";

// Version 3: metric points as packed chunks, one row per metric per commit (see metric_chunks.h).
// `id` is the write order: a later chunk's point replaces an earlier one's for the same step. The
// index finds a series' chunks from a step on (a live plot's poll reads only the newest). Rows of
// `metrics` written before stay and are read alongside, so nothing is converted or lost.
constexpr std::string_view kSchemaV3 = R"sql(
CREATE TABLE metric_chunks (
  id INTEGER PRIMARY KEY,
  run_id INTEGER NOT NULL,
  key_id INTEGER NOT NULL,
  first_step INTEGER NOT NULL,
  last_step INTEGER NOT NULL,
  count INTEGER NOT NULL,
  points BLOB NOT NULL
);
CREATE INDEX metric_chunks_series ON metric_chunks (run_id, key_id, last_step);
)sql";

// Version 4: sweeps as records of their own. A sweep is its [sweep] config, its plan and who runs
// it (the controlling process, to tell a live sweep from an interrupted one); its trials are the
// planned runs (point, seed, the point's values, the effective config) with early stopping's
// decision (the step it was stopped at and why). A run made for a trial knows its sweep, trial
// and point (NULL for other runs).
constexpr std::string_view kSchemaV4 = R"sql(
CREATE TABLE sweeps (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  status TEXT NOT NULL CHECK (status IN ('running', 'finished', 'failed')),
  created_at REAL NOT NULL,
  ended_at REAL,
  method TEXT NOT NULL,
  metric TEXT NOT NULL,
  goal TEXT NOT NULL,
  config TEXT NOT NULL DEFAULT '',
  plan TEXT NOT NULL DEFAULT '{}',
  writer_pid INTEGER,
  writer_host TEXT,
  writer_start_time INTEGER,
  message TEXT NOT NULL DEFAULT ''
);
CREATE TABLE sweep_trials (
  sweep_id INTEGER NOT NULL,
  trial INTEGER NOT NULL,
  point INTEGER NOT NULL,
  seed INTEGER NOT NULL,
  name TEXT NOT NULL,
  assignment TEXT NOT NULL DEFAULT '',
  config TEXT NOT NULL DEFAULT '',
  stopped_step INTEGER,
  note TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (sweep_id, trial)
) WITHOUT ROWID;
ALTER TABLE runs ADD COLUMN sweep_id INTEGER;
ALTER TABLE runs ADD COLUMN sweep_trial INTEGER;
ALTER TABLE runs ADD COLUMN sweep_point INTEGER;
CREATE INDEX runs_sweep ON runs (sweep_id, sweep_trial);
)sql";

// Version 5: a run's writer says it is alive (heartbeat_at, Unix seconds) with each commit and,
// when idle, every WriterOptions::heartbeat_interval. A run left "running" by a process on
// another host (a container restarted under a new host name) cannot be checked by its pid: one
// silent for long is taken as crashed.
constexpr std::string_view kSchemaV5 = R"sql(
ALTER TABLE runs ADD COLUMN heartbeat_at REAL;
)sql";

// Version 6: the time a run spent ended before a resume (runs.paused_seconds), so that its
// duration is the time it trained: a run resumed days later showed days of duration in compare,
// the reports and the runs table, and every sweep trial the time its rungs waited.
constexpr std::string_view kSchemaV6 = R"sql(
ALTER TABLE runs ADD COLUMN paused_seconds REAL NOT NULL DEFAULT 0;
)sql";

constexpr std::array<Migration, 6> kLadder = {{
    {1, "create runs, metric_keys, metrics, events, checkpoints", kSchemaV1},
    {2, "add store_info with the store's id", kSchemaV2},
    {3, "add metric_chunks (metric points packed per metric and commit)", kSchemaV3},
    {4, "add sweeps and sweep_trials; runs know their sweep, trial and point", kSchemaV4},
    {5, "add runs.heartbeat_at (the writer's last sign of life)", kSchemaV5},
    {6, "add runs.paused_seconds (time ended before a resume)", kSchemaV6},
}};

constexpr char kSqliteMagic[] = "SQLite format 3";  // 16 bytes with the NUL

std::uint32_t be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

[[noreturn]] void reject(const std::string& file, std::string_view why) {
  throw DatabaseRejectedError(str_cat("[store] ", file, ": ", why,
                                      "; the file was left unchanged. Pass another database path "
                                      "(--db PATH) or move this file away."));
}

// The first 100 bytes of `path` (SQLite's header), read through SQLite's own file layer; the count
// read. Never by opening the file ourselves: closing any descriptor of a file drops every POSIX
// lock this process holds on it, so a store this process has open (the GUI's reader, an
// in-process run's writer) would lose its locks. Another process closing the store then took
// itself for the last connection, checkpointed and deleted the WAL the writer was still
// appending to, and every later commit of the run was lost (https://sqlite.org/howtocorrupt.html,
// 2.2). SQLite's unix layer keeps such descriptors open until the process's locks are gone.
std::size_t read_header_through_sqlite(const std::filesystem::path& path,
                                       unsigned char (&header)[100]) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  struct Close {
    sqlite3* db;
    ~Close() { sqlite3_close_v2(db); }
  } close{db};
  if (rc != SQLITE_OK) {
    // SQLite's words ("unable to open database file") and the system's reason behind them.
    const int os = db != nullptr ? sqlite3_system_errno(db) : 0;
    throw StoreError(str_cat("[store] ", path.string(), ": cannot be read (",
                             db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc),
                             os != 0 ? std::string(": ") + std::strerror(os) : std::string(), ")"));
  }
  sqlite3_file* f = nullptr;
  if (sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &f) != SQLITE_OK ||
      f == nullptr || f->pMethods == nullptr)
    throw StoreError(str_cat("[store] ", path.string(), ": cannot be read"));
  // A short read fills the rest with zeros and says so; the caller compares with the file size.
  const int read = f->pMethods->xRead(f, header, static_cast<int>(sizeof header), 0);
  if (read != SQLITE_OK && read != SQLITE_IOERR_SHORT_READ)
    throw StoreError(
        str_cat("[store] ", path.string(), ": cannot be read (", sqlite3_errstr(read), ")"));
  return sizeof header;
}

// What an existing file holds, read without modifying it (but for rolling back the hot journal of
// a transaction whose process was killed, which any SQLite writer would do).
struct Inspection {
  bool fresh = false;  // empty: no schema yet
  int version = 0;
};

Inspection inspect(const std::filesystem::path& path, const OpenOptions& options) {
  const std::string file = path.string();
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw DatabaseRejectedError(str_cat("[store] ", file,
                                        " is a folder; --db names the database file in it (for "
                                        "example ",
                                        (path / "runs.sqlite").string(), ")"));
  if (!std::filesystem::is_regular_file(path, ec)) reject(file, "is not a regular file");
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw StoreError(str_cat("[store] ", file, ": cannot read its size: ", ec.message()));
  if (size == 0 && (options.read_only || !std::filesystem::exists(file + "-journal", ec)))
    return {true, 0};  // SQLite treats an empty file as an empty database
  // A process killed in the middle of a transaction in rollback mode (creating the store, before
  // it turns to WAL) leaves a hot journal and a file that may not even start with SQLite's
  // header yet. Only a read-write connection may roll it back, as SQLite does on its first read
  // (a journal that is not hot, its writer alive, is left alone); then the file is read as is.
  // A read-only open writes nothing: it reports the file as it finds it.
  if (!options.read_only && std::filesystem::exists(file + "-journal", ec)) {
    try {
      Connection rw(path, {.read_only = false, .busy_timeout_ms = options.busy_timeout_ms});
      (void)rw.query_int("PRAGMA user_version");
    } catch (const StoreError&) {  // not a database, or not writable: judged below as it is
    }
    if (std::filesystem::file_size(path, ec) == 0 && !ec) return {true, 0};
  }

  unsigned char header[100] = {};
  {
    const auto length = std::filesystem::file_size(path, ec);
    if (ec) throw StoreError(str_cat("[store] ", file, ": cannot read its size: ", ec.message()));
    const std::size_t got = read_header_through_sqlite(path, header);
    const std::size_t n = std::min<std::uintmax_t>(got, length);
    if (n < 16 || std::string_view(reinterpret_cast<const char*>(header), 16) !=
                      std::string_view(kSqliteMagic, 16)) {
      reject(file,
             "is not a TrainBench run database (not an SQLite file: it does not start with "
             "'SQLite format 3')");
    }
    if (n < 100) reject(file, "is a truncated SQLite file (shorter than its header)");
  }
  const std::uint32_t header_app_id = be32(header + 68);
  if (header_app_id != 0 && header_app_id != static_cast<std::uint32_t>(kApplicationId)) {
    reject(file, str_cat("is another application's SQLite database (application_id ",
                         hex32(header_app_id), ", TrainBench's is ",
                         hex32(static_cast<std::uint32_t>(kApplicationId)), ")"));
  }

  // The header may be stale while recent commits sit in the WAL: ask SQLite, read-only.
  Inspection result;
  std::vector<std::string> tables;
  std::int64_t app_id = 0;
  const auto read_schema = [&] {
    Connection ro(path, {.read_only = true, .busy_timeout_ms = options.busy_timeout_ms});
    // One read transaction: the id, version and tables come from one snapshot. Read one by one
    // they could straddle another process's schema creation (id still 0, tables already there)
    // and reject a TrainBench store as another application's (seen with three runs started at
    // once into a new store).
    ro.exec("BEGIN");
    app_id = ro.query_int("PRAGMA application_id");
    result.version = static_cast<int>(ro.query_int("PRAGMA user_version"));
    Statement st = ro.prepare(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
        "ORDER BY name");
    while (st.step())
      tables.push_back(st.text(0));
    if (options.check == IntegrityCheck::kQuick) {
      Statement qc = ro.prepare("PRAGMA quick_check(1)");
      const std::string verdict = qc.step() ? qc.text(0) : "no answer";
      if (verdict != "ok") {
        reject(file, str_cat("is corrupted (PRAGMA quick_check: ", verdict,
                             "); restore it from a backup"));
      }
    }
    ro.exec("COMMIT");
  };
  try {
    read_schema();
  } catch (const DatabaseRejectedError&) {
    throw;
  } catch (const StoreError& e) {
    // SQLITE_READONLY (8) and its extended codes: even a reader of a WAL database writes its
    // -shm file beside it, so a folder (or file) this user may not write is not corruption.
    // The file is fine: the advice is about access, not about moving it away.
    if ((e.sqlite_code() & 0xff) == 8)
      throw DatabaseRejectedError(
          str_cat("[store] ", file,
                  ": cannot be opened: the file or its folder is read-only for this user (SQLite "
                  "writes its -wal and -shm files beside the database, even to read it); copy it "
                  "to a writable folder to read it there, or get write access to the folder. The "
                  "file was left unchanged."));
    // SQLITE_FULL (13) and SQLITE_IOERR (10, e.g. IOERR_SHMSIZE when the -shm file cannot grow):
    // the disk is full or failing, which is not the file's fault; moving it away (the advice
    // for a corrupted file) could lose a good store.
    const int primary = e.sqlite_code() & 0xff;
    if (primary == 13 || primary == 10) {
      std::error_code space_ec;
      const auto room =
          std::filesystem::space(std::filesystem::absolute(file, space_ec).parent_path(), space_ec);
      const std::string disk =
          !space_ec && room.available < (1u << 20)
              ? str_cat("its disk is full (", room.available, " bytes free)")
              : std::string("SQLite could not write beside it (a full disk or an I/O error)");
      throw DatabaseRejectedError(str_cat("[store] ", file, ": cannot be opened: ", disk,
                                          "; free space on that disk and try again. The file was "
                                          "left unchanged (",
                                          e.what(), ")"));
    }
    // SQLite's message without the "[store] FILE: " the rejection already starts with.
    std::string_view why = e.what();
    const std::string own = str_cat("[store] ", file, ": ");
    if (why.substr(0, own.size()) == own) why.remove_prefix(own.size());
    reject(file, str_cat("cannot be read as an SQLite database (corrupted?): ", why));
  }

  if (static_cast<std::uint32_t>(app_id) != static_cast<std::uint32_t>(kApplicationId)) {
    if (app_id != 0) {
      reject(file, str_cat("is another application's SQLite database (application_id ",
                           hex32(static_cast<std::uint32_t>(app_id)), ")"));
    }
    if (!tables.empty()) {
      std::string names;
      for (std::size_t i = 0; i < tables.size() && i < 8; ++i) {
        names += (i ? ", " : "") + tables[i];
      }
      if (tables.size() > 8) names += ", ...";
      reject(file, str_cat("is an SQLite database of another application (tables ", names,
                           "; no TrainBench application_id)"));
    }
    return {true, 0};
  }
  const int latest = options.ladder.empty() ? 0 : options.ladder.back().to_version;
  if (result.version > latest) {
    reject(file, str_cat("was written by a newer TrainBench (schema version ", result.version,
                         "; this build reads versions up to ", latest,
                         "). Open it with that newer version"));
  }
  return result;
}

void configure(Connection& db, bool read_only, int busy_timeout_ms) {
  if (read_only) return;
  // 16 KiB pages (a no-op on an existing file): fewer, fuller B-tree pages for the metrics rows;
  // measured faster ingest than the 4 KiB default.
  db.exec("PRAGMA page_size = 16384");
  // Switching to WAL needs an exclusive lock, and SQLite reports SQLITE_BUSY for it without
  // calling the busy handler when another process holds the file (two runs creating the same
  // store at once, e.g. `trainbench-cli launch`): retry until the busy timeout.
  std::string mode;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    try {
      Statement wal = db.prepare("PRAGMA journal_mode = WAL");
      mode = wal.step() ? wal.text(0) : "";
      break;
    } catch (const StoreError& e) {
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::steady_clock::now() - start)
                              .count();
      if (e.sqlite_code() != SQLITE_BUSY || waited >= busy_timeout_ms) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (mode != "wal") {
    throw StoreError(str_cat("[store] ", db.file(), ": cannot switch to WAL journal mode (got '",
                             mode, "'); is the file on a network file system?"));
  }
  db.exec("PRAGMA synchronous = NORMAL");
}

}  // namespace

std::span<const Migration> migrations() {
  return kLadder;
}

Connection open_database(const std::filesystem::path& path, const OpenOptions& options) {
  const std::string file = path.string();
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  const int latest = options.ladder.empty() ? 0 : options.ladder.back().to_version;
  Inspection found{true, 0};
  if (exists) {
    // A rejected file is left as it was found: the -wal and -shm files SQLite created beside it
    // to read it (and could not remove on close: a read-only or corrupted database) go too.
    // Ones that were there before are not touched; nor is a -wal with content.
    const std::filesystem::path wal = file + "-wal", shm = file + "-shm";
    const bool had_wal = std::filesystem::exists(wal, ec),
               had_shm = std::filesystem::exists(shm, ec);
    try {
      found = inspect(path, options);
    } catch (const DatabaseRejectedError&) {
      std::error_code rm;
      if (!had_wal && std::filesystem::exists(wal, rm) &&
          std::filesystem::file_size(wal, rm) == 0 && !rm)
        std::filesystem::remove(wal, rm);
      if (!had_shm && !std::filesystem::exists(wal, rm)) std::filesystem::remove(shm, rm);
      throw;
    }
  } else if (options.read_only) {
    throw StoreError(str_cat("[store] ", file, ": no run database at this path"));
  } else if (path.has_parent_path()) {
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) {
      throw StoreError(str_cat("[store] ", file, ": cannot create the directory ",
                               path.parent_path().string(), ": ", ec.message()));
    }
  }
  if (found.version < latest && (options.read_only || !options.migrate)) {
    throw StoreError(str_cat("[store] ", file, ": schema version ", found.version,
                             " needs an upgrade to version ", latest,
                             "; open the database read-write once (e.g. trainbench-cli runs)"));
  }

  Connection db(path, {.read_only = options.read_only,
                       .create = !options.read_only,
                       .busy_timeout_ms = options.busy_timeout_ms});
  configure(db, options.read_only, options.busy_timeout_ms);
  if (options.read_only || found.version == latest) return db;

  // Migrate under the write lock; re-read the version there (another process may have done it).
  Transaction tx(db);
  const auto app_id = db.query_int("PRAGMA application_id");
  int version = static_cast<int>(db.query_int("PRAGMA user_version"));
  if (app_id != 0 && app_id != kApplicationId) {
    reject(file, "changed to another application's database while opening");
  }
  if (version > latest) {
    reject(file, str_cat("was written by a newer TrainBench (schema version ", version,
                         "; this build reads versions up to ", latest, ")"));
  }
  for (const Migration& m : options.ladder) {
    if (m.to_version <= version) continue;
    try {
      db.exec(m.sql);
    } catch (const StoreError& e) {
      throw StoreError(str_cat("[store] ", file, ": migration to schema version ", m.to_version,
                               " (", m.description, ") failed, nothing was changed: ", e.what()));
    }
    version = m.to_version;
  }
  db.exec(str_cat("PRAGMA application_id = ", kApplicationId));
  db.exec(str_cat("PRAGMA user_version = ", version));
  tx.commit();
  return db;
}

}  // namespace tb::store::detail
