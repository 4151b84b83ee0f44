// Error types of the run store. Both derive from tb::Error; messages start with "[store]" and
// name the database file (and the run or field where there is one).
#pragma once

#include <string>

#include "engine/core/error.h"

namespace tb::store {

/// A database operation failed (I/O error, disk full, locked for longer than the busy timeout,
/// SQLite error). The message names the file, the operation and SQLite's own message.
class StoreError : public Error {
 public:
  using Error::Error;
  /// A failure with SQLite's primary result code (e.g. SQLITE_BUSY = 5).
  StoreError(const std::string& message, int sqlite_code) : Error(message), code_(sqlite_code) {}
  /// SQLite's primary result code, 0 when the error did not come from SQLite.
  int sqlite_code() const noexcept { return code_; }

 private:
  int code_ = 0;
};

/// The file is not a usable TrainBench run database: not an SQLite file, corrupted (fails
/// PRAGMA quick_check), another application's database, or written by a newer TrainBench. The
/// file has not been modified. The message says which and what to do.
class DatabaseRejectedError : public StoreError {
 public:
  using StoreError::StoreError;
};

}  // namespace tb::store
