// Error: the one exception type for load, config and parse failures. Context (file, tensor,
// byte offset, line:column) is prepended on the way up with add_context().
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>

namespace tq {

class Error : public std::runtime_error {
 public:
  explicit Error(std::string msg) : std::runtime_error(msg), msg_(std::move(msg)) {}
  const char* what() const noexcept override { return msg_.c_str(); }
  // Prepends "context: " to the message, e.g. the file name around a parse error.
  Error& add_context(const std::string& context) {
    msg_ = context + ": " + msg_;
    return *this;
  }

 private:
  std::string msg_;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// Runs fn(); an Error escaping it gets `context` prepended.
template <typename Fn>
auto with_context(const std::string& context, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (Error& e) {
    e.add_context(context);
    throw;
  }
}

}  // namespace tq
