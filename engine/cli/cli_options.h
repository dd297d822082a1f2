// Command-line options shared by the sipllm subcommands.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "sipllm/engine.h"

namespace sipllm::cli {

extern const char* const kUsage;

// A mistake on the command line (exit code 2), as opposed to an engine error.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Backend { kFile, kMmap };

struct CommonOptions {
  std::string model;
  Backend backend = Backend::kFile;
  EngineOptions engine;
  ThrottleOptions throttle;  // all zero: no throttle
};

struct RunOptions {
  std::string prompt;
  GenerateOptions generate;
  std::string logits_out;
};

struct BenchOptions {
  int prompt_tokens = 128;
  int gen_tokens = 32;
  bool sweep_budget = false;
  int sweep_steps = 8;
};

struct ParsedArgs {
  CommonOptions common;
  RunOptions run;
  BenchOptions bench;
};

ParsedArgs parse_args(const std::string& command, const std::vector<std::string>& args);

// Opens the model with the chosen backend, throttle and engine options.
std::unique_ptr<Engine> open_engine(const CommonOptions& options);

std::string format_stats_line(const GenerationStats& stats, const CommonOptions& options);

int run_bench(const CommonOptions& common, const BenchOptions& bench);

}  // namespace sipllm::cli
