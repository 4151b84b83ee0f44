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

/// A bad value of one named field of a kind's settings (a model's `d_model`, a scheduler's
/// `T_max`): the message as the kind words it, and the field, so a config reader can point at
/// `model.d_model` without reading the message.
class FieldError : public ValueError {
 public:
  /// `field` relative to the kind's table ("d_model"); `message` is the whole what().
  FieldError(std::string field, const std::string& message)
      : ValueError(message), field_(std::move(field)) {}
  /// The field the error is about.
  const std::string& field() const noexcept { return field_; }

 private:
  std::string field_;
};

/// One problem with a run configuration, as data: where it is and what is wrong.
struct ConfigProblem {
  std::string source;    ///< the file, "<editor>", ...
  std::string key_path;  ///< "optimizer.lr", "optimiser" (an unknown section); "" = no key
  int line = 0;          ///< 1-based line in the source, 0 = unknown (a --set, a missing key)
  int column = 0;        ///< 1-based column, 0 = unknown
  std::string message;   ///< what is wrong ("expected a number, found string \"fast\"")
};

/// A bad run configuration. what() is the full message ("[config] SOURCE: KEY: MESSAGE", or
/// "[config] SOURCE: MESSAGE" when the message names the key itself, e.g. "unknown key 'a.b';
/// did you mean 'a.c'?"), and problem() the same as data. Every config reader raises it.
class ConfigError : public ValueError {
 public:
  /// `what` is the complete message.
  ConfigError(ConfigProblem problem, const std::string& what)
      : ValueError(what), problem_(std::move(problem)) {}
  /// Where and what.
  const ConfigProblem& problem() const noexcept { return problem_; }

 private:
  ConfigProblem problem_;
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
