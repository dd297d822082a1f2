#include "cli_options.h"

namespace sipllm::cli {

int run_bench(const CommonOptions&, const BenchOptions&) {
  throw UsageError("bench is not available yet");
}

}  // namespace sipllm::cli
