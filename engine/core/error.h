// Error types of the engine: user mistakes vs internal invariants.
//
// User-facing errors derive from tb::Error and carry a message that starts with
// "[component or op]", names the values involved and, where the fix is known, says it.
// Internal invariant violations throw tb::InternalError, whose message says it is a bug.
// Library code never calls exit() or abort(); everything is reported by exception.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace tb {

/// Base class of every error caused by how the engine was used (bad shape, dtype, index,
/// configuration, missing kernel, ...). what() is the complete user-facing message.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A value is out of its allowed range or malformed (shape mismatch, bad argument value).
class ValueError : public Error {
 public:
  using Error::Error;
};

/// An argument has the wrong dtype or device for the operation.
class TypeError : public Error {
 public:
  using Error::Error;
};

/// An index or dimension is out of range.
class IndexError : public Error {
 public:
  using Error::Error;
};

/// The requested operation has no implementation for the given device/dtype combination.
class NotImplementedError : public Error {
 public:
  using Error::Error;
};

/// An internal invariant was violated: this is a bug in TrainBench, not a usage error.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

namespace detail {
/// Concatenates any streamable values into one string (used by the check macros).
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace detail

}  // namespace tb

/// Throws `ExcType` with the concatenated message when `cond` is false.
#define TB_CHECK_T(ExcType, cond, ...)                   \
  do {                                                   \
    if (!(cond)) {                                       \
      throw ExcType(::tb::detail::str_cat(__VA_ARGS__)); \
    }                                                    \
  } while (false)

/// Throws tb::ValueError with the concatenated message when `cond` is false.
#define TB_CHECK(cond, ...) TB_CHECK_T(::tb::ValueError, cond, __VA_ARGS__)

/// Internal invariant: throws tb::InternalError naming file:line; the message says it is a bug.
#define TB_INTERNAL_ASSERT(cond, ...)                                                         \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      throw ::tb::InternalError(                                                              \
          ::tb::detail::str_cat("internal error (a bug in TrainBench, please report it) at ", \
                                __FILE__, ":", __LINE__, ": ", #cond, " ", ##__VA_ARGS__));   \
    }                                                                                         \
  } while (false)
