// Writes web/src/bridge/bridge.generated.ts from the lists of bridge_options.h and
// bridge_results.h, so that the package's option and result types are those
// bindings.cpp reads and writes.
//
//   sipllm_bridge_types                prints the file
//   sipllm_bridge_types --check FILE   exits 1, saying how to refresh it, when
//                                      FILE differs from what it would print
#include <fstream>
#include <iostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>

#include "bridge_options.h"
#include "bridge_results.h"

namespace sipllm::wasm {
namespace {

// One option list as the TypeScript side sees it.
struct OptionTable {
  std::string_view interface_name;       // of the public options
  std::string_view wire_interface_name;  // with the worker's own options too ("": none)
  std::string_view keys_name;            // constant listing the public option names ("": none)
  std::string_view non_negative_name;    // constant listing those that must be >= 0 ("": none)
  std::string_view summary;              // the comment on the interface
  std::span<const OptionSpec> specs;
};

std::string typescript_type(const OptionSpec& spec) {
  switch (spec.type) {
    case OptionType::kInteger:
    case OptionType::kNumber:
    case OptionType::kByteCount:
    case OptionType::kSafeWhole:
      return "number";
    case OptionType::kBoolean:
      return "boolean";
    case OptionType::kText:
      return "string";
    case OptionType::kTextList:
      return "string[]";
    case OptionType::kTokenBiases:
      return "Array<[number, number]>";
    case OptionType::kChoice: {
      std::string out;
      for (std::string_view choice : spec.choices) {
        if (!out.empty()) out += " | ";
        out.append("'").append(choice).append("'");
      }
      return out;
    }
  }
  return "unknown";
}

void write_doc(std::ostream& out, std::string_view doc, std::string_view indent) {
  if (doc.find('\n') == std::string_view::npos) {
    out << indent << "/** " << doc << " */\n";
    return;
  }
  out << indent << "/**\n";
  while (!doc.empty()) {
    const size_t end = doc.find('\n');
    const std::string_view line = doc.substr(0, end);
    out << indent << " *" << (line.empty() ? "" : " ") << line << "\n";
    doc = end == std::string_view::npos ? std::string_view() : doc.substr(end + 1);
  }
  out << indent << " */\n";
}

void write_fields(std::ostream& out, const OptionTable& table, OptionAudience audience) {
  for (const OptionSpec& spec : table.specs) {
    if (spec.audience != audience) continue;
    write_doc(out, spec.doc, "  ");
    out << "  " << spec.js_name << "?: " << typescript_type(spec) << ";\n";
  }
}

void write_key_list(std::ostream& out, std::string_view name, const OptionTable& table, OptionRange only) {
  out << "export const " << name << " = [";
  bool first = true;
  for (const OptionSpec& spec : table.specs) {
    if (spec.audience != OptionAudience::kPublic) continue;
    if (only != OptionRange::kAny && spec.range != only) continue;
    out << (first ? "" : ", ") << "'" << spec.js_name << "'";
    first = false;
  }
  out << "] as const;\n";
}

void write_table(std::ostream& out, const OptionTable& table) {
  out << "\n";
  write_doc(out, table.summary, "");
  out << "export interface " << table.interface_name << " {\n";
  write_fields(out, table, OptionAudience::kPublic);
  out << "}\n";
  if (!table.wire_interface_name.empty()) {
    write_doc(out, std::string(table.interface_name) + " and what the engine worker adds of its own.", "");
    out << "export interface " << table.wire_interface_name << " extends " << table.interface_name << " {\n";
    write_fields(out, table, OptionAudience::kWorker);
    out << "}\n";
  }
  if (!table.keys_name.empty()) {
    out << "\n";
    write_key_list(out, table.keys_name, table, OptionRange::kAny);
  }
  if (!table.non_negative_name.empty()) write_key_list(out, table.non_negative_name, table, OptionRange::kNonNegative);
}

// One result list as the TypeScript side sees it.
struct ResultTable {
  std::string_view interface_name;
  std::string_view summary;
  std::span<const ResultSpec> specs;
};

std::string_view typescript_type(const ResultSpec& spec) {
  switch (spec.type) {
    case ResultType::kNumber:
    case ResultType::kBudget:
      return "number";
    case ResultType::kBoolean:
      return "boolean";
    case ResultType::kText:
    case ResultType::kName:
      return "string";
    case ResultType::kNested:
      return spec.ts;
  }
  return "unknown";
}

void write_table(std::ostream& out, const ResultTable& table) {
  out << "\n";
  write_doc(out, table.summary, "");
  out << "export interface " << table.interface_name << " {\n";
  for (const ResultSpec& spec : table.specs) {
    if (!spec.doc.empty()) write_doc(out, spec.doc, "  ");
    out << "  " << spec.js_name << ": " << typescript_type(spec) << ";\n";
  }
  out << "}\n";
}

// ModelHyperparameters, from SIPLLM_HYPERPARAMETERS (sipllm/engine.h).
void write_hyperparameters(std::ostream& out) {
  out << "\n";
  write_doc(out,
            "The model's hyper-parameters (SIPLLM_HYPERPARAMETERS in sipllm/engine.h), names\n"
            "in camelCase: the optional ones where the model has them.",
            "");
  out << "export interface ModelHyperparameters {\n";
#define SIPLLM_WRITE_HYPERPARAMETER(name, always, what) \
  write_doc(out, what, "  ");                         \
  out << "  " << camel_case(#name) << ((always) ? "" : "?") << ": number;\n";
  SIPLLM_HYPERPARAMETERS(SIPLLM_WRITE_HYPERPARAMETER)
#undef SIPLLM_WRITE_HYPERPARAMETER
  out << "}\n";
}

std::string generate() {
  const OptionTable tables[] = {
      {"EngineLoadOptions", "EngineOpenOptions", "ENGINE_LOAD_OPTION_KEYS", "NON_NEGATIVE_LOAD_OPTION_KEYS",
       "The engine and HTTP options of a load (LoadOptions), as Session.openUrl and\n"
       "Session.openBytes read them.",
       kOpenOptionSpecs},
      {"EngineGenerateOptions", "", "", "",
       "The options of a generation as Session.generate and Session.generateTokens\n"
       "read them (GenerateOptions takes the logit bias in friendlier forms).",
       kGenerateOptionSpecs},
      {"EngineEmbedOptions", "", "", "",
       "The options of an embedding as Session.embed reads them.", kEmbedOptionSpecs},
  };
  const ResultTable results[] = {
      {"ModelInfo", "The model's description (ModelInfo in sipllm/engine.h).", kModelInfoSpecs},
      {"UnitCounters", "One stream unit's loader counters.", kUnitCountersSpecs},
      {"UnitEvent",
       "One load of one unit (block or output-head piece) and its use; times in ms\n"
       "since the loader started, 0 where a phase did not happen.",
       kUnitEventSpecs},
      {"LoaderStats", "The loader's counters and timeline.", kLoaderStatsSpecs},
      {"ParallelTime",
       "The loops a phase split between the compute threads (ParallelTime in\n"
       "sipllm/engine.h): the rest of the phase ran on one thread.",
       kParallelTimeSpecs},
      {"EngineGenerationStats", "A generation's figures as the engine reports them.", kGenerationStatsSpecs},
      {"SourceStats", "What the HTTP source has done so far.", kSourceStatsSpecs},
      {"CachedModel", "A model in the cache.", kCachedModelSpecs},
  };
  std::ostringstream out;
  out << "// Generated by wasm-bindings/bridge_types.cpp from the lists of\n"
         "// wasm-bindings/bridge_options.h and bridge_results.h: edit those, then run\n"
         "// scripts/build-wasm.sh (or scripts/generate-bridge-types.sh). The ctest test\n"
         "// BridgeTypes.UpToDate fails while this file is stale.\n";
  for (const OptionTable& table : tables) write_table(out, table);
  write_hyperparameters(out);
  for (const ResultTable& table : results) write_table(out, table);
  return out.str();
}

}  // namespace
}  // namespace sipllm::wasm

int main(int argc, char** argv) {
  const std::string text = sipllm::wasm::generate();
  if (argc == 1) {
    std::cout << text;
    return 0;
  }
  if (argc == 3 && std::string_view(argv[1]) == "--check") {
    std::ifstream file(argv[2], std::ios::binary);
    std::stringstream committed;
    committed << file.rdbuf();
    if (file && committed.str() == text) return 0;
    std::cerr << argv[2] << " does not match wasm-bindings/bridge_options.h: "
              << "run scripts/generate-bridge-types.sh and commit the result\n";
    return 1;
  }
  std::cerr << "usage: " << argv[0] << " [--check FILE]\n";
  return 2;
}
