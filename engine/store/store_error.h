// Error types of the run store. Both derive from tb::Error; messages start with "[store]" and
// name the database file (and the run or field where there is one).
#pragma once

#include "engine/core/error.h"

namespace tb::store {

/// A database operation failed (I/O error, disk full, locked for longer than the busy timeout,
/// SQLite error). The message names the file, the operation and SQLite's own message.
class StoreError : public Error {
 public:
  using Error::Error;
};

/// The file is not a usable TrainBench run database: not an SQLite file, corrupted (fails
/// PRAGMA quick_check), another application's database, or written by a newer TrainBench. The
/// file has not been modified. The message says which and what to do.
class DatabaseRejectedError : public StoreError {
 public:
  using StoreError::StoreError;
};

}  // namespace tb::store
