#pragma once
// kiln::Error: every user-facing failure names the op, what was expected and what was found, e.g.
//   conv2d: expected input of 4 dims (N,C,H,W), got [100, 100]

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kiln {

class Error : public std::runtime_error {
 public:
  Error(std::string op, std::string message)
      : std::runtime_error(op.empty() ? message : op + ": " + message),
        op_(std::move(op)),
        message_(std::move(message)) {}
  const std::string& op() const { return op_; }
  const std::string& message() const { return message_; }

 private:
  std::string op_;
  std::string message_;
};

// A value the trace read back (item()) differs at run time: the input takes a path the trace did
// not record (kiln.guard). The message names where the value was read, and both values.
class GuardError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// Throws kiln::Error(op, concat(args...)). Kept out of line in callers' hot paths by [[unlikely]].
template <typename... Args>
[[noreturn]] void fail(std::string_view op, const Args&... args) {
  throw Error(std::string(op), detail::concat(args...));
}

}  // namespace kiln

#define KILN_CHECK(cond, op, ...)      \
  do {                                 \
    if (!(cond)) [[unlikely]] {        \
      ::kiln::fail((op), __VA_ARGS__); \
    }                                  \
  } while (0)
