// Thin RAII wrappers over the SQLite C API used inside the run store: a connection and a
// prepared statement. Errors become tb::store::StoreError naming the file and SQLite's message.
// A Connection and its Statements belong to one thread at a time (opened SQLITE_OPEN_NOMUTEX).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "engine/store/store_error.h"

struct sqlite3;
struct sqlite3_stmt;

namespace tb::store::detail {

/// A prepared statement. Bind parameters are 1-based, columns 0-based (as in SQLite).
class Statement {
 public:
  /// Compiles `sql` on `db`; throws StoreError naming `file` when it does not compile.
  Statement(sqlite3* db, std::string_view sql, const std::string& file);
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  /// Binds an integer to parameter `i`.
  Statement& bind(int i, std::int64_t value);
  /// Binds a double; NaN is stored as NULL (SQLite has no NaN) and reads back as NaN.
  Statement& bind(int i, double value);
  /// Binds text (copied by SQLite).
  Statement& bind(int i, std::string_view value);
  /// Binds a blob of `bytes` bytes (copied by SQLite).
  Statement& bind_blob(int i, const void* data, std::size_t bytes);
  /// Binds NULL.
  Statement& bind_null(int i);
  /// Binds an optional integer (NULL when empty).
  Statement& bind(int i, std::optional<std::int64_t> value);

  /// Runs one step: true when a row is available, false when done. Throws StoreError.
  bool step();
  /// Runs to completion and resets, for statements that return no rows.
  void run();
  /// Resets for another execution (bindings are kept until rebound).
  void reset();

  /// Column `i` of the current row as an integer.
  std::int64_t int64(int i) const;
  /// Column `i` as a double; NULL reads as NaN.
  double real(int i) const;
  /// Column `i` as text ("" for NULL).
  std::string text(int i) const;
  /// Column `i` as a blob: its bytes, valid until the next step/reset (empty for NULL).
  std::span<const unsigned char> blob(int i) const;
  /// Whether column `i` is NULL.
  bool is_null(int i) const;
  /// Column `i` as an optional integer (nullopt for NULL).
  std::optional<std::int64_t> opt_int64(int i) const;
  /// Column `i` as an optional double (nullopt for NULL).
  std::optional<double> opt_real(int i) const;

 private:
  void check_bind(int rc, int i);  // throws StoreError naming the statement unless SQLITE_OK

  sqlite3_stmt* stmt_ = nullptr;
  sqlite3* db_ = nullptr;
  // The database's file, for messages: a copy (a pointer into the Connection dangled once the
  // connection was moved).
  std::string file_;
};

/// How to open a connection.
struct OpenFlags {
  bool read_only = false;      ///< SQLITE_OPEN_READONLY (never writes the database file)
  bool create = false;         ///< create the file when it does not exist (read-write only)
  int busy_timeout_ms = 5000;  ///< how long a statement waits for another connection's lock
};

/// One SQLite connection to a file.
class Connection {
 public:
  /// Opens `path` with `flags`. Throws StoreError naming the file when SQLite cannot open it.
  Connection(const std::filesystem::path& path, OpenFlags flags);
  ~Connection();
  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&& other) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// Runs one or more SQL statements that return no rows. Throws StoreError.
  void exec(std::string_view sql);
  /// Prepares one statement.
  Statement prepare(std::string_view sql) const;
  /// The value of a one-row, one-integer query (e.g. "PRAGMA user_version").
  std::int64_t query_int(std::string_view sql) const;
  /// The file this connection opened, as given.
  const std::string& file() const noexcept { return file_; }
  /// The raw handle (for sqlite3_* calls not wrapped here).
  sqlite3* handle() const noexcept { return db_; }
  /// Throws StoreError "[store] FILE: WHAT: sqlite message" for result code `rc`.
  [[noreturn]] void fail(int rc, std::string_view what) const;

 private:
  sqlite3* db_ = nullptr;
  std::string file_;
};

/// BEGIN IMMEDIATE ... COMMIT; rolls back when destroyed without commit().
class Transaction {
 public:
  /// Starts a write transaction (takes the write lock now, waiting up to the busy timeout).
  explicit Transaction(Connection& db);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  /// Commits; throws StoreError on failure (the transaction is then rolled back).
  void commit();

 private:
  Connection& db_;
  bool open_ = true;
};

}  // namespace tb::store::detail
