// SQLite connection and statement wrappers.
#include "engine/store/database.h"

#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <utility>

namespace tb::store::detail {
namespace {

// For I/O failures, what the operating system said, and what it means for the user: SQLite's
// "disk I/O error" alone does not tell a full disk from a broken one.
std::string os_error_note(sqlite3* db, int rc) {
  const int primary = rc & 0xff;
  if (db == nullptr || (primary != SQLITE_IOERR && primary != SQLITE_FULL &&
                        primary != SQLITE_CANTOPEN && primary != SQLITE_READONLY)) {
    return "";
  }
  const int err = sqlite3_system_errno(db);
  if (err == 0 && rc == SQLITE_READONLY)  // opened read-only (not _DBMOVED): no errno kept
    return " (the store is read-only for this user: give the file and its folder write access, "
           "or copy it to a writable folder)";
  if (err == 0) {
    // SQLite does not always keep errno; a failed write or sync is still most likely space.
    const bool write_failed = primary == SQLITE_FULL || rc == SQLITE_IOERR_WRITE ||
                              rc == SQLITE_IOERR_FSYNC || rc == SQLITE_IOERR_TRUNCATE;
    return write_failed ? " (writing to the disk failed: is the disk full or a file-size limit "
                          "reached? free space and resume the run)"
                        : "";
  }
  std::string note = ::tb::detail::str_cat(" (", std::strerror(err));
  if (err == ENOSPC || err == EFBIG || err == EDQUOT) {
    note += ": the disk is full or a file-size limit was reached; free space and resume the run";
  } else if (err == EACCES || err == EROFS || err == EPERM) {
    note += ": the database or its folder is not writable";
  }
  return note + ")";
}

// A statement as an error names it: its start, not a whole INSERT of fifteen columns.
std::string brief(std::string_view sql) {
  constexpr std::size_t kMost = 48;
  if (sql.size() <= kMost) return std::string(sql);
  return std::string(sql.substr(0, kMost - 8)) + " ...";
}

[[noreturn]] void throw_sqlite(sqlite3* db, int rc, const std::string& file,
                               std::string_view what) {
  const char* msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  throw StoreError(::tb::detail::str_cat("[store] ", file, ": ", what, ": ", msg,
                                         os_error_note(db, rc), " (SQLite code ", rc, ")"),
                   rc & 0xff);
}

// Why a new database file cannot be made, said by the file system rather than by SQLite's last
// errno (often the ENOENT of a probe for the journal): the folder that is missing or that this
// user may not write. "" when the folder looks fine.
std::string folder_problem(const std::string& file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(file, ec)) return "";
  fs::path folder = fs::path(file).parent_path();
  if (folder.empty()) folder = ".";
  if (!fs::exists(folder, ec)) return "the folder " + folder.string() + " does not exist";
  if (!fs::is_directory(folder, ec)) return folder.string() + " is not a folder";
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    return ::tb::detail::str_cat("the folder ", folder.string(), " is not writable by this user (",
                                 std::strerror(errno),
                                 "); pass --db with a path in a writable folder");
  return "";
}

}  // namespace

Statement::Statement(sqlite3* db, std::string_view sql, const std::string& file)
    : db_(db), file_(file) {
  const int rc = sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()),
                                    SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr);
  if (rc != SQLITE_OK) {
    throw_sqlite(db, rc, file, ::tb::detail::str_cat("cannot prepare '", brief(sql), "'"));
  }
}

Statement::~Statement() {
  sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& other) noexcept
    : stmt_(std::exchange(other.stmt_, nullptr)), db_(other.db_), file_(std::move(other.file_)) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    stmt_ = std::exchange(other.stmt_, nullptr);
    db_ = other.db_;
    file_ = std::move(other.file_);
  }
  return *this;
}

// A bind that fails (SQLITE_TOOBIG for a text or blob over the limit, SQLITE_RANGE for an index
// the SQL does not have) is said at once, naming the statement: unchecked it left the parameter
// NULL, and the statement stored NULL or failed later with a misleading constraint error.
void Statement::check_bind(int rc, int i) {
  if (rc == SQLITE_OK) return;
  const std::string sql = sqlite3_sql(stmt_) != nullptr ? sqlite3_sql(stmt_) : "";
  throw_sqlite(db_, rc, file_,
               ::tb::detail::str_cat("cannot bind parameter ", i, " of '", brief(sql), "'"));
}

Statement& Statement::bind(int i, std::int64_t value) {
  check_bind(sqlite3_bind_int64(stmt_, i, value), i);
  return *this;
}

Statement& Statement::bind(int i, double value) {
  check_bind(std::isnan(value) ? sqlite3_bind_null(stmt_, i) : sqlite3_bind_double(stmt_, i, value),
             i);
  return *this;
}

Statement& Statement::bind(int i, std::string_view value) {
  check_bind(
      sqlite3_bind_text64(stmt_, i, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8), i);
  return *this;
}

Statement& Statement::bind_blob(int i, const void* data, std::size_t bytes) {
  check_bind(sqlite3_bind_blob64(stmt_, i, data, bytes, SQLITE_TRANSIENT), i);
  return *this;
}

std::span<const unsigned char> Statement::blob(int i) const {
  const auto* p = static_cast<const unsigned char*>(sqlite3_column_blob(stmt_, i));
  const int n = sqlite3_column_bytes(stmt_, i);
  return p != nullptr ? std::span<const unsigned char>(p, static_cast<std::size_t>(n))
                      : std::span<const unsigned char>();
}

Statement& Statement::bind_null(int i) {
  check_bind(sqlite3_bind_null(stmt_, i), i);
  return *this;
}

Statement& Statement::bind(int i, std::optional<std::int64_t> value) {
  return value ? bind(i, *value) : bind_null(i);
}

bool Statement::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  const std::string sql = sqlite3_sql(stmt_) != nullptr ? sqlite3_sql(stmt_) : "";
  sqlite3_reset(stmt_);
  throw_sqlite(db_, rc, file_, ::tb::detail::str_cat("'", brief(sql), "' failed"));
}

void Statement::run() {
  while (step()) {
  }
  reset();
}

void Statement::reset() {
  sqlite3_reset(stmt_);
}

std::int64_t Statement::int64(int i) const {
  return sqlite3_column_int64(stmt_, i);
}

double Statement::real(int i) const {
  if (is_null(i)) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(stmt_, i);
}

std::string Statement::text(int i) const {
  const auto* p = sqlite3_column_text(stmt_, i);
  const int n = sqlite3_column_bytes(stmt_, i);
  return p != nullptr ? std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(n))
                      : std::string();
}

bool Statement::is_null(int i) const {
  return sqlite3_column_type(stmt_, i) == SQLITE_NULL;
}

std::optional<std::int64_t> Statement::opt_int64(int i) const {
  if (is_null(i)) return std::nullopt;
  return int64(i);
}

std::optional<double> Statement::opt_real(int i) const {
  if (is_null(i)) return std::nullopt;
  return real(i);
}

Connection::Connection(const std::filesystem::path& path, OpenFlags flags) : file_(path.string()) {
  int mode = SQLITE_OPEN_NOMUTEX;
  if (flags.read_only) {
    mode |= SQLITE_OPEN_READONLY;
  } else {
    mode |= SQLITE_OPEN_READWRITE;
    if (flags.create) mode |= SQLITE_OPEN_CREATE;
  }
  const int rc = sqlite3_open_v2(file_.c_str(), &db_, mode, nullptr);
  if (rc != SQLITE_OK) {
    const std::string msg = db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    const std::string note = os_error_note(db_, rc);
    sqlite3_close_v2(db_);
    db_ = nullptr;
    const std::string folder = flags.create ? folder_problem(file_) : std::string();
    if (!folder.empty())
      throw StoreError(
          ::tb::detail::str_cat("[store] ", file_, ": cannot create the run database: ", folder));
    throw StoreError(::tb::detail::str_cat("[store] ", file_, ": cannot open the run database: ",
                                           msg, note, " (SQLite code ", rc, ")"));
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, flags.busy_timeout_ms);
}

Connection::~Connection() {
  sqlite3_close_v2(db_);
}

Connection::Connection(Connection&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), file_(std::move(other.file_)) {}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
    file_ = std::move(other.file_);
  }
  return *this;
}

void Connection::exec(std::string_view sql) {
  const std::string s(sql);
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, s.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    const std::string msg = err != nullptr ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    throw StoreError(::tb::detail::str_cat("[store] ", file_, ": '", brief(sql), "' failed: ", msg,
                                           os_error_note(db_, rc), " (SQLite code ", rc, ")"),
                     rc & 0xff);
  }
}

Statement Connection::prepare(std::string_view sql) const {
  return Statement(db_, sql, file_);
}

std::int64_t Connection::query_int(std::string_view sql) const {
  Statement st = prepare(sql);
  if (!st.step()) fail(SQLITE_ERROR, ::tb::detail::str_cat("'", sql, "' returned no row"));
  return st.int64(0);
}

void Connection::fail(int rc, std::string_view what) const {
  throw_sqlite(db_, rc, file_, what);
}

Transaction::Transaction(Connection& db) : db_(db) {
  db_.exec("BEGIN IMMEDIATE");
}

Transaction::~Transaction() {
  if (open_) sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
  db_.exec("COMMIT");
  open_ = false;
}

}  // namespace tb::store::detail
