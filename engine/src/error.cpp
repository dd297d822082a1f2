#include "sipllm/error.h"

namespace sipllm {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kIo: return "io";
    case ErrorKind::kNetwork: return "network";
    case ErrorKind::kFormat: return "format";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kInvalidArgument: return "invalid-argument";
    case ErrorKind::kOutOfBudget: return "out-of-budget";
    case ErrorKind::kContextFull: return "context-full";
    case ErrorKind::kAborted: return "aborted";
  }
  return "unknown";
}

}  // namespace sipllm
