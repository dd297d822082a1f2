// sipllm: the command-line client of the engine library.
//
//   sipllm run -m MODEL.gguf -p "PROMPT" -n N [sampling] [--logits-out FILE]
//   sipllm info -m MODEL.gguf
//   sipllm tokenize -m MODEL.gguf -p "TEXT" [--no-special] [--no-parse-special] [--timing]
//   sipllm embed -m MODEL.gguf -p "TEXT" [-p "TEXT"...] [--pooling mean|cls|last]
//   sipllm bench -m MODEL.gguf [loader and run options]
//   sipllm gen --shape NAME --type TYPE --vocab VOCAB.gguf -o OUT.gguf
//   sipllm split --parts N [--data-gap BYTES] MODEL.gguf PREFIX
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "cli_options.h"
#include "sipllm/engine.h"
#include "sipllm/gguf_split.h"
#include "sipllm/random_model.h"
#include "sipllm/vocabulary.h"

namespace sipllm::cli {
namespace {

// One line per text: its embedding's floats.
int run_embed(const CommonOptions& common, const EmbedCliOptions& options) {
  if (options.texts.empty()) throw UsageError("embed needs at least one -p TEXT");
  auto engine = open_engine(common);
  for (const std::vector<float>& e : engine->embed(options.texts, options.embed)) {
    for (size_t i = 0; i < e.size(); ++i) std::printf(i == 0 ? "%.9g" : " %.9g", static_cast<double>(e[i]));
    std::printf("\n");
  }
  return 0;
}

int run_info(const CommonOptions& common) {
  auto engine = open_engine(common);
  const ModelInfo& m = engine->info();
  std::printf("file          %s (%llu bytes, GGUF v%u)\n", common.model.c_str(),
              static_cast<unsigned long long>(m.file_bytes), m.gguf_version);
  std::printf("architecture  %s%s%s\n", m.architecture.c_str(), m.name.empty() ? "" : "  name: ",
              m.name.c_str());
  for (const Hyperparameter& h : m.hyperparameters) std::printf("%-22s %g\n", h.name.c_str(), h.value);
  std::printf("output head   %s\n", m.tied_output ? "tied to token_embd" : "output.weight");
  std::printf("weights       %llu bytes\n", static_cast<unsigned long long>(m.weight_bytes));
  std::printf("tensors      ");
  for (const auto& [type, count] : m.tensors_by_type) std::printf(" %s x%d", type.c_str(), count);
  std::printf("\n");
  std::printf("tokenizer     %s (bos %d, eos %d)\n", m.tokenizer.c_str(), m.bos, m.eos);
  std::printf("chat template %s\n", m.chat_template.empty() ? "none" : "yes");
  return 0;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kIo, path + ": cannot open for reading");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// Prints the token ids of the text on one line. Only the vocabulary is read,
// so a file without weights (or hyper-parameters) works too.
int run_tokenize(const CommonOptions& common, const RunOptions& run, const TokenizeOptions& options) {
  const std::string text = options.file.empty() ? run.prompt : read_text_file(options.file);
  const auto load_start = std::chrono::steady_clock::now();
  const std::unique_ptr<Vocabulary> vocab = Vocabulary::open(open_source(common));
  const double load_ms = ms_since(load_start);
  const auto encode_start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = vocab->tokenize(text, run.generate.add_special, run.generate.parse_special);
  const double encode_ms = ms_since(encode_start);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
  if (options.timing) {
    std::fprintf(stderr, "vocabulary: %d tokens, %s, loaded in %.1f ms\n", vocab->size(), vocab->kind().c_str(),
                 load_ms);
    std::fprintf(stderr, "encode: %zu bytes -> %zu tokens in %.2f ms (%.2f MB/s)\n", text.size(), ids.size(),
                 encode_ms, encode_ms > 0 ? static_cast<double>(text.size()) / 1e3 / encode_ms : 0.0);
  }
  return 0;
}

void write_logits(const std::string& path, const std::vector<float>& logits, int n_positions, int n_vocab) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(ErrorKind::kIo, path + ": cannot open for writing");
  const int32_t header[2] = {n_positions, n_vocab};
  // The format is little-endian; so are all the platforms this builds for.
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  out.write(reinterpret_cast<const char*>(logits.data()),
            static_cast<std::streamsize>(logits.size() * sizeof(float)));
  if (!out) throw Error(ErrorKind::kIo, path + ": write failed");
}

int run_generate(const CommonOptions& common, const RunOptions& run) {
  auto engine = open_engine(common);
  const std::vector<int32_t> prompt =
      engine->tokenize(run.prompt, run.generate.add_special, run.generate.parse_special);
  if (!run.logits_out.empty()) {
    const std::vector<float> logits = engine->evaluate(prompt, /*all_positions=*/true);
    write_logits(run.logits_out, logits, static_cast<int>(prompt.size()), engine->info().n_vocab());
  }
  std::fputs(run.prompt.c_str(), stdout);
  std::fflush(stdout);
  const GenerationStats stats =
      engine->generate_tokens(prompt, run.generate, [](const TokenEvent& event) {
        std::fputs(event.text.c_str(), stdout);
        std::fflush(stdout);
        return true;
      });
  std::printf("\n");
  std::fflush(stdout);
  std::fprintf(stderr, "%s\n", format_stats_line(stats, common).c_str());
  return 0;
}

// sipllm gen --shape NAME --type TYPE --vocab VOCAB.gguf [--seed S] -o OUT.gguf
int run_gen(const std::vector<std::string>& args) {
  RandomModelSpec spec;
  std::string out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (i + 1 >= args.size()) throw UsageError(flag + " needs a value");
    const std::string& value = args[++i];
    if (flag == "--shape") {
      spec.shape = value;
    } else if (flag == "--type") {
      spec.type = value;
    } else if (flag == "--vocab") {
      spec.vocab_path = value;
    } else if (flag == "--seed") {
      spec.seed = std::stoull(value);
    } else if (flag == "-o" || flag == "--out") {
      out = value;
    } else {
      throw UsageError("unknown option '" + flag + "' for 'gen'");
    }
  }
  if (out.empty() || spec.vocab_path.empty()) {
    throw UsageError("gen needs --vocab VOCAB.gguf and -o OUT.gguf");
  }
  write_random_model(spec, out);
  std::printf("wrote %s (%s, %s)\n", out.c_str(), spec.shape.c_str(), spec.type.c_str());
  return 0;
}

// sipllm split --parts N [--data-gap BYTES] MODEL.gguf PREFIX
int run_split(const std::vector<std::string>& args) {
  int parts = 0;
  uint64_t data_gap = 0;
  std::vector<std::string> positional;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--parts" || arg == "--data-gap") {
      if (i + 1 >= args.size()) throw UsageError(arg + " needs a value");
      const std::string& value = args[++i];
      if (arg == "--parts") {
        parts = static_cast<int>(parse_int(arg, value, 1, 65535));
      } else {
        data_gap = parse_bytes(arg, value);
      }
    } else if (arg.rfind("-", 0) == 0) {
      throw UsageError("unknown option '" + arg + "' for 'split'");
    } else {
      positional.push_back(arg);
    }
  }
  if (parts == 0 || positional.size() != 2) throw UsageError("split needs --parts N, MODEL.gguf and PREFIX");
  auto source = open_file_source(positional[0]);
  write_split_model(*source, positional[1], parts, data_gap);
  std::printf("wrote %s ... %s\n", split_part_name(positional[1], 0, parts).c_str(),
              split_part_name(positional[1], parts - 1, parts).c_str());
  return 0;
}

}  // namespace

int main_with_args(std::vector<std::string> args) {
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::fputs(kUsage, stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "gen") return run_gen(args);
  if (command == "split") return run_split(args);
  ParsedArgs parsed = parse_args(command, args);
  if (command == "info") return run_info(parsed.common);
  if (command == "embed") return run_embed(parsed.common, parsed.embed);
  if (command == "tokenize") return run_tokenize(parsed.common, parsed.run, parsed.tokenize);
  if (command == "run") return run_generate(parsed.common, parsed.run);
  if (command == "bench") return run_bench(parsed.common, parsed.bench);
  throw UsageError("unknown command '" + command + "'");
}

}  // namespace sipllm::cli

int main(int argc, char** argv) {
  try {
    return sipllm::cli::main_with_args(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const sipllm::cli::UsageError& e) {
    std::fprintf(stderr, "sipllm: %s\n(see sipllm --help)\n", e.what());
    return 2;
  } catch (const sipllm::Error& e) {
    std::fprintf(stderr, "sipllm: %s error: %s\n", sipllm::error_kind_name(e.kind()), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sipllm: error: %s\n", e.what());
    return 1;
  }
}
