// Errors the engine reports. Every failure the engine detects surfaces as one
// sipllm::Error whose message names what was wrong (a key, a tensor, an offset),
// so callers can show it as is.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace sipllm {

enum class ErrorKind {
  kIo,           // the weight source could not deliver bytes (file, disk)
  kNetwork,      // an HTTP transport failed or answered out of protocol
  kFormat,       // the file is not a valid GGUF model or contradicts itself
  kUnsupported,  // valid, but uses a type or architecture the engine lacks
  kInvalidArgument,
  kOutOfBudget,  // a memory budget too small for what was asked
  kContextFull,  // prompt plus requested tokens exceed the context length
  kAborted,      // cancelled by the caller
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// An option outside the values it takes (kInvalidArgument). option() names
// it as the C++ options do ("top_p"), requirement() says the rest ("must be
// above 0 and at most 1, not 0"), so that a client can name the option as
// its own callers spell it ("topP", "--top-p") around the same words.
class InvalidOption : public Error {
 public:
  InvalidOption(std::string option, std::string requirement)
      : Error(ErrorKind::kInvalidArgument, option + " " + requirement),
        option_(std::move(option)), requirement_(std::move(requirement)) {}
  const std::string& option() const { return option_; }
  const std::string& requirement() const { return requirement_; }

 private:
  std::string option_;
  std::string requirement_;
};

}  // namespace sipllm
