// Status and Result<T>: how every user-facing error leaves kiln.
//
// User mistakes come back as a Status whose message names the node, port or JSON path and says what was
// expected and what was found. Internal invariants abort through KILN_CHECK. No exception crosses the
// public API.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace kiln {

enum class StatusCode {
  ok,
  invalid_argument,  // the user's graph, attribute, binding or file content is wrong
  not_found,         // a file, tensor or name that does not exist
  io_error,          // reading or writing a file failed
  unsupported,       // valid request that this build or backend cannot do
  unavailable,       // what the request needs is not present here (no CUDA driver, no GPU)
  device_error,      // the GPU or its driver reported an error (launch failure, out of memory, ...)
  internal,          // a bug in kiln
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return {}; }

  bool ok() const { return code_ == StatusCode::ok; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "invalid_argument: node 'conv1' ..." — for logs; the CLI prints message() alone.
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::ok;
  std::string message_;
};

inline Status invalid_argument(std::string msg) { return {StatusCode::invalid_argument, std::move(msg)}; }
inline Status not_found(std::string msg) { return {StatusCode::not_found, std::move(msg)}; }
inline Status io_error(std::string msg) { return {StatusCode::io_error, std::move(msg)}; }
inline Status unsupported(std::string msg) { return {StatusCode::unsupported, std::move(msg)}; }

// A value or the Status saying why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) {
      std::fprintf(stderr, "kiln: internal error: Result constructed from an ok Status\n");
      std::abort();
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status ok_status;
    return ok() ? ok_status : std::get<Status>(v_);
  }
  T& value() & { return checked(); }
  const T& value() const& { return const_cast<Result*>(this)->checked(); }
  T&& value() && { return std::move(checked()); }
  T* operator->() { return &checked(); }
  const T* operator->() const { return &const_cast<Result*>(this)->checked(); }
  T& operator*() & { return checked(); }
  const T& operator*() const& { return const_cast<Result*>(this)->checked(); }

 private:
  T& checked() {
    if (!ok()) {
      std::fprintf(stderr, "kiln: internal error: value() of a failed Result: %s\n",
                   std::get<Status>(v_).message().c_str());
      std::abort();
    }
    return std::get<T>(v_);
  }
  std::variant<T, Status> v_;
};

}  // namespace kiln

// Internal invariant: aborts with file and line. Never used for user input.
#define KILN_CHECK(cond, msg)                                                                     \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      std::fprintf(stderr, "kiln: internal error at %s:%d: %s (%s)\n", __FILE__, __LINE__, #cond, \
                   std::string(msg).c_str());                                                     \
      std::abort();                                                                               \
    }                                                                                             \
  } while (0)

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)

// Returns early with the Status of a failed expression.
#define KILN_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::kiln::Status kiln_status_ = (expr);        \
    if (!kiln_status_.ok()) return kiln_status_; \
  } while (0)

#define KILN_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

// KILN_ASSIGN_OR_RETURN(auto x, f()); declares x from a Result or returns its Status.
#define KILN_ASSIGN_OR_RETURN(lhs, expr) KILN_ASSIGN_OR_RETURN_IMPL(KILN_CONCAT(kiln_result_, __LINE__), lhs, expr)
