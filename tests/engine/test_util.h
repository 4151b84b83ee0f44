// Helpers shared by the engine test suites.
#pragma once

#include <exception>
#include <string>

namespace tb::test {

/// Runs f and returns the message of the exception it throws, or "<no error>".
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace tb::test
