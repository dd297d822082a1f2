// Errors the engine reports. Every failure the engine detects surfaces as one
// sipllm::Error whose message names what was wrong (a key, a tensor, an offset),
// so callers can show it as is.
#pragma once

#include <stdexcept>
#include <string>

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

}  // namespace sipllm
