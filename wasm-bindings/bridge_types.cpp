// Writes web/src/bridge/bridge.generated.ts from the lists of bridge_options.h and
// bridge_results.h, so that the package's option and result types are those
// bindings.cpp reads and writes.
//
//   sipllm_bridge_types                prints the file
//   sipllm_bridge_types --check FILE   exits 1, saying how to refresh it, when
//                                      FILE differs from what it would print
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <type_traits>
#include <span>
#include <sstream>
#include <string>
#include <string_view>

#include "bridge_options.h"
#include "bridge_results.h"
#include "bridge_surface.h"
#include "session.h"  // OpenOptions: its fields' defaults

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

// An option's documentation, with its range when the engine declares one
// (SIPLLM_GENERATE_RANGES): "Must be above 0 and at most 1."
std::string documentation(const OptionSpec& spec) {
  std::string doc(spec.doc);
  for (const sipllm::OptionRange& range : kGenerateOptionRanges) {
    if (range.member != spec.member) continue;
    std::string requirement = range.requirement();
    requirement[0] = 'M';
    doc += "\n" + requirement + ".";
  }
  return doc;
}

void write_fields(std::ostream& out, const OptionTable& table, OptionAudience audience) {
  for (const OptionSpec& spec : table.specs) {
    if (spec.audience != audience) continue;
    write_doc(out, documentation(spec), "  ");
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
    case ResultType::kMaybe:
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
    out << "  " << spec.js_name << (spec.type == ResultType::kMaybe ? "?: " : ": ") << typescript_type(spec) << ";\n";
  }
  out << "}\n";
}

// The Embind surface (bridge_surface.h): a Session's methods, the module's
// functions, and the Answer the calls answered at once return.
void write_surface(std::ostream& out) {
  out << "\n";
  write_doc(out, "What a call answered at once returns: its value, or the error it threw.", "");
  out << "export interface Answer<T> {\n  value?: T;\n  error?: { kind: string; message: string; option?: string };\n}\n\n";
  write_doc(out, "A Session of the engine's module (new Module.Session(id)), as bindings.cpp registers it.", "");
  out << "export interface EngineSession {\n";
#define SIPLLM_WRITE_METHOD(js_name, fn, ts, doc)        \
  if (!std::string_view(doc).empty()) write_doc(out, doc, "  "); \
  out << "  " << #js_name << ts << ";\n";
  SIPLLM_SESSION_METHODS(SIPLLM_WRITE_METHOD)
  out << "  /** Frees it (Embind's). */\n  delete(): void;\n}\n\n";
  write_doc(out, "The functions of the engine's module, as bindings.cpp registers them.", "");
  out << "export interface EngineModuleFunctions {\n";
  SIPLLM_MODULE_FUNCTIONS(SIPLLM_WRITE_METHOD)
#undef SIPLLM_WRITE_METHOD
  out << "}\n";
}

// The architectures the engine runs (supported_architectures, from its
// table of families).
void write_architectures(std::ostream& out) {
  out << "\n";
  write_doc(out, "The architectures (general.architecture) the engine runs.", "");
  out << "export const ARCHITECTURES = [";
  const std::vector<std::string> names = supported_architectures();
  for (size_t i = 0; i < names.size(); ++i) out << (i == 0 ? "'" : ", '") << names[i] << "'";
  out << "] as const;\nexport type Architecture = (typeof ARCHITECTURES)[number];\n";
}

// How the engine reads a GGUF header over HTTP (sipllm/http_source.h), which
// the page's early fetch repeats.
void write_header_reads(std::ostream& out) {
  out << "\n";
  write_doc(out, "The engine's first range request of a file, and the most it reads for the header (http_source.h).", "");
  out << "export const HTTP_FIRST_RANGE_BYTES = " << kHttpFirstRangeBytes << ";\n";
  out << "export const HTTP_MAX_HEAD_BYTES = " << kHttpMaxHeadBytes << ";\n";
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

// ---- The options' defaults, from the C++ structs ----------------------------

// An option's default as TypeScript writes it, when it is a plain value.
template <class Field>
std::optional<std::string> default_text(const OptionSpec& spec, const Field& value) {
  if constexpr (std::is_same_v<Field, bool>) {
    return value ? "true" : "false";
  } else if constexpr (std::is_enum_v<Field>) {
    return "'" + std::string(spec.choices[static_cast<size_t>(value)]) + "'";
  } else if constexpr (std::is_arithmetic_v<Field>) {
    if (spec.type == OptionType::kByteCount && static_cast<uint64_t>(value) == kUnlimitedBudget) return std::nullopt;
    std::ostringstream text;
    text << value;
    return text.str();
  } else {
    return std::nullopt;  // text, lists, a seed: no plain default
  }
}

// A default the option's documentation states ("default 30000", "Default
// 'f16'", "default true") must be the struct's: the generator fails
// otherwise, so that the two cannot drift apart.
void check_documented_default(std::string_view table, const OptionSpec& spec, const std::string& value) {
  std::string doc(spec.doc);
  for (char& c : doc) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t at = doc.find("default ");
  if (at == std::string::npos) return;
  std::string stated = doc.substr(at + 8);
  stated = stated.substr(0, stated.find_first_of(" ,;()\n"));
  while (!stated.empty() && stated.back() == '.') stated.pop_back();
  const bool numeric = !stated.empty() && (std::isdigit(static_cast<unsigned char>(stated[0])) || stated[0] == '-');
  const bool literal = stated == "true" || stated == "false" || (!stated.empty() && stated[0] == '\'');
  if (!numeric && !literal) return;  // "default: the machine's cores", "default unlimited"
  std::string actual = value;
  for (char& c : actual) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 1;  // "default 1 MiB"
  if (numeric && doc.compare(at + 8 + stated.size(), 4, " mib") == 0) scale = 1 << 20;
  if (numeric ? std::strtod(stated.c_str(), nullptr) * scale != std::strtod(actual.c_str(), nullptr) : stated != actual) {
    std::cerr << table << "." << spec.js_name << ": its documentation says default " << stated
              << ", but the C++ default is " << value << "\n";
    std::exit(1);
  }
}

// export const NAME = { option: default, ... }: the public options whose
// default is a plain value, as the engine's structs have them.
void write_defaults(std::ostream& out, std::string_view name, std::string_view what,
                    std::span<const OptionSpec> specs, const std::vector<std::optional<std::string>>& values) {
  out << "\n";
  write_doc(out, what, "");
  out << "export const " << name << " = {\n";
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].audience != OptionAudience::kPublic || !values[i]) continue;
    check_documented_default(name, specs[i], *values[i]);
    out << "  " << specs[i].js_name << ": " << *values[i] << ",\n";
  }
  out << "} as const;\n";
}

#define SIPLLM_DEFAULT_OF(js_name, type, range, audience, choices, member, doc) \
  default_text(SIPLLM_OPTION_SPEC(js_name, type, range, audience, choices, member, doc), defaults.member),

void write_all_defaults(std::ostream& out) {
  {
    const OpenOptions defaults;
    write_defaults(out, "ENGINE_LOAD_DEFAULTS", "The engine's defaults of EngineLoadOptions (its C++ structs').",
                                kOpenOptionSpecs, {SIPLLM_OPEN_OPTIONS(SIPLLM_DEFAULT_OF)});
  }
  {
    const GenerateOptions defaults;
    write_defaults(out, "ENGINE_GENERATE_DEFAULTS",
                                    "The engine's defaults of EngineGenerateOptions (its C++ structs').",
                                    kGenerateOptionSpecs, {SIPLLM_GENERATE_OPTIONS(SIPLLM_DEFAULT_OF)});
  }
  {
    const EmbedOptions defaults;
    write_defaults(out, "ENGINE_EMBED_DEFAULTS", "The engine's defaults of EngineEmbedOptions (its C++ structs').",
                                 kEmbedOptionSpecs, {SIPLLM_EMBED_OPTIONS(SIPLLM_DEFAULT_OF)});
  }
}

#undef SIPLLM_DEFAULT_OF

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
      {"LiveUnit", "A stream unit as the loader's counters describe it (Session.liveUnits).", kLiveUnitSpecs},
      {"SessionStats", "The session's figures (Session.stats): what the package's Stats takes from the engine.",
       kSessionStatsSpecs},
      {"JobOutcome",
       "How a job ended (Session.takeResult): a generation's statistics, or an embed job's\n"
       "vectors and the tokens its texts took.",
       kJobOutcomeSpecs},
  };
  std::ostringstream out;
  out << "// Generated by wasm-bindings/bridge_types.cpp from the lists of\n"
         "// wasm-bindings/bridge_options.h and bridge_results.h: edit those, then run\n"
         "// scripts/build-wasm.sh (or scripts/generate-bridge-types.sh). The ctest test\n"
         "// BridgeTypes.UpToDate fails while this file is stale.\n";
  for (const OptionTable& table : tables) write_table(out, table);
  write_all_defaults(out);
  write_architectures(out);
  write_header_reads(out);
  write_hyperparameters(out);
  write_surface(out);
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
