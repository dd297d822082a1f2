// The Embind surface of the engine: JavaScript objects in, JavaScript objects
// out, nothing else. Option objects use the engine's defaults for every field
// left undefined; numbers of bytes travel as doubles (exact below 2^53). The
// functions (bridge_surface.h), the options read (bridge_options.h) and the
// results written (bridge_results.h) are declared once, and their TypeScript
// generated from there.
//
// A job (generate, generateTokens, embed, warmUp) sends its events through
// Module.sipllmHost.event(id, 'tokens' | 'done' | 'progress' | 'alive'); a
// busy engine sends 'alive' about every 250 ms. Calls answered at once return
// {value} or {error: {kind, message}}.
#include <emscripten/bind.h>
#include <emscripten/heap.h>
#include <emscripten/threading.h>
#include <emscripten/val.h>

#include <cctype>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "bridge_options.h"
#include "bridge_results.h"
#include "bridge_surface.h"
#include "js_host.h"
#include "session.h"
#include "sipllm/error.h"
#include "sipllm/grammar.h"

namespace sipllm::wasm {
namespace {

using emscripten::val;

bool has(const val& object, const char* key) {
  if (object.isUndefined() || object.isNull()) return false;
  const val v = object[key];
  return !v.isUndefined() && !v.isNull();
}

[[noreturn]] void bad_option(const OptionSpec& spec, const std::string& must) {
  throw InvalidOption(std::string(spec.js_name), must);
}

double number(const val& v, const OptionSpec& spec) {
  if (v.typeOf().as<std::string>() != "number") bad_option(spec, "must be a number");
  const double d = v.as<double>();
  if (std::isnan(d)) bad_option(spec, "is NaN");
  if (spec.range == OptionRange::kNonNegative && d < 0) bad_option(spec, "must be a number >= 0");
  return d;
}

int integer(const val& v, const OptionSpec& spec) {
  const double d = number(v, spec);
  if (d != std::floor(d) || std::abs(d) > 2147483647.0) bad_option(spec, "must be an integer");
  return static_cast<int>(d);
}

uint64_t byte_count(const val& v, const OptionSpec& spec) {
  const double d = number(v, spec);
  if (d < 0 || d != std::floor(d)) bad_option(spec, "must be a whole number of bytes");
  return d >= 1.8e19 ? kUnlimitedBudget : static_cast<uint64_t>(d);
}

std::string text(const val& v, const OptionSpec& spec) {
  if (v.typeOf().as<std::string>() != "string") bad_option(spec, "must be a string");
  return v.as<std::string>();
}

// The index of the value among spec.choices: the enum's value.
int choice(const val& v, const OptionSpec& spec) {
  const std::string given = text(v, spec);
  std::string names;
  for (size_t i = 0; i < spec.choices.size(); ++i) {
    if (spec.choices[i] == given) return static_cast<int>(i);
    names += (i == 0 ? "" : i + 1 == spec.choices.size() ? " or " : ", ") + ("'" + std::string(spec.choices[i]) + "'");
  }
  bad_option(spec, "must be " + names + ", not '" + given + "'");
}

std::vector<std::string> string_array(const val& array, const std::string& what);

// Sets `field` from object[spec.js_name] as `Type` says; an undefined or null
// value leaves the field's default. `field` is the C++ options' own member
// (bridge_options.h names it): a list whose type does not fit its member does
// not compile.
template <OptionType Type, class Field>
void read_option(const val& object, const OptionSpec& spec, Field& field) {
  if (!has(object, spec.js_name.data())) return;
  const val v = object[spec.js_name.data()];
  if constexpr (Type == OptionType::kBoolean) {
    static_assert(std::is_same_v<Field, bool>);
    field = v.as<bool>();
  } else if constexpr (Type == OptionType::kInteger) {
    static_assert(std::is_same_v<Field, int>);
    field = integer(v, spec);
  } else if constexpr (Type == OptionType::kNumber) {
    static_assert(std::is_floating_point_v<Field>);
    field = static_cast<Field>(number(v, spec));
  } else if constexpr (Type == OptionType::kByteCount) {
    static_assert(std::is_unsigned_v<Field> && sizeof(Field) >= sizeof(uint32_t));
    const uint64_t bytes = byte_count(v, spec);
    if (bytes > std::numeric_limits<Field>::max()) bad_option(spec, "is too large");
    field = static_cast<Field>(bytes);
  } else if constexpr (Type == OptionType::kSafeWhole) {
    static_assert(std::is_same_v<Field, std::optional<uint64_t>>);
    const double d = number(v, spec);
    if (d < 0 || d != std::floor(d) || d > 9007199254740991.0) bad_option(spec, "must be a whole number from 0 to 2^53 - 1");
    field = static_cast<uint64_t>(d);
  } else if constexpr (Type == OptionType::kText) {
    static_assert(std::is_same_v<Field, std::string>);
    field = text(v, spec);
  } else if constexpr (Type == OptionType::kTextList) {
    static_assert(std::is_same_v<Field, std::vector<std::string>>);
    field = string_array(v, "option '" + std::string(spec.js_name) + "'");
  } else if constexpr (Type == OptionType::kTokenBiases) {
    static_assert(std::is_same_v<Field, std::map<int32_t, float>>);
    if (!v.isArray()) bad_option(spec, "must be an array of [token, bias] pairs");
    const int n = v["length"].as<int>();
    for (int i = 0; i < n; ++i) field[v[i][0].as<int32_t>()] = v[i][1].as<float>();
  } else {
    static_assert(Type == OptionType::kChoice && std::is_enum_v<Field>);
    field = static_cast<Field>(choice(v, spec));
  }
}

#define SIPLLM_READ_OPTION(js_name, type, range, audience, choices, member, doc) \
  read_option<OptionType::type>(object, SIPLLM_OPTION_SPEC(js_name, type, range, audience, choices, member, doc), options.member);

OpenOptions open_options(const val& object) {
  OpenOptions options;
  SIPLLM_OPEN_OPTIONS(SIPLLM_READ_OPTION)
  return options;
}

// Read, then held to the engine's ranges at once (before a job is queued),
// its refusal naming the option as JavaScript does.
GenerateOptions generate_options(const val& object, int n_vocab) {
  GenerateOptions options;
  SIPLLM_GENERATE_OPTIONS(SIPLLM_READ_OPTION)
  try {
    check_generate_options(options, n_vocab);
  } catch (const InvalidOption& e) {
    for (const OptionSpec& spec : kGenerateOptionSpecs) {
      if (spec.engine_name() == e.option()) bad_option(spec, e.requirement());
    }
    throw;
  }
  return options;
}

EmbedOptions embed_options(const val& object) {
  EmbedOptions options;
  SIPLLM_EMBED_OPTIONS(SIPLLM_READ_OPTION)
  return options;
}

#undef SIPLLM_READ_OPTION

std::vector<int32_t> int_array(const val& array) {
  std::vector<int32_t> out;
  const int n = array["length"].as<int>();
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out.push_back(array[i].as<int32_t>());
  return out;
}

std::vector<std::string> string_array(const val& array, const std::string& what) {
  if (!array.isArray()) throw Error(ErrorKind::kInvalidArgument, what + " must be an array of strings");
  std::vector<std::string> out;
  const int n = array["length"].as<int>();
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const val item = array[i];
    if (item.typeOf().as<std::string>() != "string") {
      throw Error(ErrorKind::kInvalidArgument, what + "[" + std::to_string(i) + "] must be a string");
    }
    out.push_back(item.as<std::string>());
  }
  return out;
}

val error_object(const std::string& kind, const std::string& message) {
  val error = val::object();
  error.set("kind", kind);
  error.set("message", message);
  return error;
}

// Runs `fn` and wraps its value, or the error it threw, for JavaScript. An
// option's refusal names it ("option 'topP' must be ...") and carries its
// name, so that a layer above can name it as its own callers do.
val answer(const std::function<val()>& fn) {
  val out = val::object();
  try {
    out.set("value", fn());
  } catch (const InvalidOption& e) {
    val error = error_object(error_kind_name(e.kind()), "option '" + e.option() + "' " + e.requirement());
    error.set("option", e.option());
    out.set("error", error);
  } catch (const Error& e) {
    out.set("error", error_object(error_kind_name(e.kind()), e.what()));
  } catch (const std::exception& e) {
    out.set("error", error_object("internal", e.what()));
  }
  return out;
}

// ---- Results, written from the lists of bridge_results.h ---------------------------

// Each listed struct as an object, declared before the templates that call
// them: the structs live in namespace sipllm, where argument-dependent lookup
// would not find these.
val to_js(const UnitCounters& s);
val to_js(const UnitEvent& s);
val to_js(const LoaderStats& s);
val to_js(const ParallelTime& s);
val to_js(const GenerationStats& s);
val to_js(const HttpSourceStats& s);
val to_js(const ModelInfo& s);
val to_js(const CachedModel& s);
val to_js(const LiveUnit& s);
val to_js(const SessionStats& s);
val to_js(const JobResult& s);

val to_js(const JobError& e) { return error_object(e.kind, e.message); }

val to_js(const Embeddings& e) {
  val vectors = val::array();
  for (size_t i = 0; i < e.vectors.size(); ++i) {
    const std::vector<float>& v = e.vectors[i];
    // A copy: the view into the heap would not survive the vector.
    vectors.set(i, val(emscripten::typed_memory_view(v.size(), v.data())).call<val>("slice"));
  }
  val out = val::object();
  out.set("vectors", vectors);
  out.set("tokens", e.tokens);
  return out;
}

// The hyper-parameters as the engine lists them, snake_case names in camelCase.
val to_js(const std::vector<Hyperparameter>& hyperparameters) {
  val o = val::object();
  for (const Hyperparameter& h : hyperparameters) o.set(camel_case(h.name), h.value);
  return o;
}

val to_js(const std::map<std::string, int>& counts) {
  val o = val::object();
  for (const auto& [name, count] : counts) o.set(name, count);
  return o;
}

template <class Item>
val to_js(const std::vector<Item>& items) {
  val array = val::array();
  for (size_t i = 0; i < items.size(); ++i) array.set(i, to_js(items[i]));
  return array;
}

// Sets object[js_name] from `field` as `Type` says (bridge_results.h); a
// list whose type does not fit its member does not compile.
template <ResultType Type, class Field>
void write_field(val& object, const char* js_name, const Field& field) {
  if constexpr (Type == ResultType::kNumber) {
    static_assert(std::is_arithmetic_v<Field> && !std::is_same_v<Field, bool>);
    object.set(js_name, static_cast<double>(field));
  } else if constexpr (Type == ResultType::kBoolean) {
    static_assert(std::is_same_v<Field, bool>);
    object.set(js_name, field);
  } else if constexpr (Type == ResultType::kText) {
    static_assert(std::is_same_v<Field, std::string>);
    object.set(js_name, field);
  } else if constexpr (Type == ResultType::kBudget) {
    static_assert(std::is_same_v<Field, uint64_t>);
    object.set(js_name, field == kUnlimitedBudget ? -1.0 : static_cast<double>(field));
  } else if constexpr (Type == ResultType::kName) {
    static_assert(std::is_same_v<Field, StopReason>);
    object.set(js_name, std::string(stop_reason_name(field)));
  } else if constexpr (Type == ResultType::kMaybe) {
    if (field) object.set(js_name, to_js(*field));
  } else {
    static_assert(Type == ResultType::kNested);
    object.set(js_name, to_js(field));
  }
}

#define SIPLLM_WRITE_FIELD(js_name, type, member, ts, doc) write_field<ResultType::type>(o, #js_name, s.member);

// One JavaScript object per result structure, field by field from its list.
#define SIPLLM_TO_JS(Type, FIELDS) \
  val to_js(const Type& s) {       \
    val o = val::object();         \
    FIELDS(SIPLLM_WRITE_FIELD)     \
    return o;                      \
  }

SIPLLM_TO_JS(UnitCounters, SIPLLM_UNIT_COUNTERS_FIELDS)
SIPLLM_TO_JS(UnitEvent, SIPLLM_UNIT_EVENT_FIELDS)
SIPLLM_TO_JS(LoaderStats, SIPLLM_LOADER_STATS_FIELDS)
SIPLLM_TO_JS(ParallelTime, SIPLLM_PARALLEL_TIME_FIELDS)
SIPLLM_TO_JS(GenerationStats, SIPLLM_GENERATION_STATS_FIELDS)
SIPLLM_TO_JS(HttpSourceStats, SIPLLM_SOURCE_STATS_FIELDS)
SIPLLM_TO_JS(ModelInfo, SIPLLM_MODEL_INFO_FIELDS)
SIPLLM_TO_JS(CachedModel, SIPLLM_CACHED_MODEL_FIELDS)
SIPLLM_TO_JS(LiveUnit, SIPLLM_LIVE_UNIT_FIELDS)
SIPLLM_TO_JS(SessionStats, SIPLLM_SESSION_STATS_FIELDS)
SIPLLM_TO_JS(JobResult, SIPLLM_JOB_OUTCOME_FIELDS)

#undef SIPLLM_TO_JS
#undef SIPLLM_WRITE_FIELD

// ---- Session methods as JavaScript sees them ---------------------------------------

val open_url(Session& s, const std::string& url, const val& options) {
  return answer([&] {
    s.open_url(url, open_options(options));
    return val::undefined();
  });
}

val open_bytes(Session& s, int bytes_id, double size, const std::string& name, const val& options) {
  return answer([&] {
    s.open_bytes(bytes_id, static_cast<uint64_t>(size), name, open_options(options));
    return val::undefined();
  });
}

val generate(Session& s, const std::string& prompt, const val& options) {
  return answer([&] {
    s.generate(prompt, generate_options(options, s.info().n_vocab()));
    return val::undefined();
  });
}

val generate_tokens(Session& s, const val& tokens, const val& options) {
  return answer([&] {
    s.generate_tokens(int_array(tokens), generate_options(options, s.info().n_vocab()));
    return val::undefined();
  });
}

val embed(Session& s, const val& texts, const val& options) {
  return answer([&] {
    s.embed(string_array(texts, "texts"), embed_options(options));
    return val::undefined();
  });
}

val take_tokens(Session& s) {
  val out = val::array();
  const std::vector<TokenEvent> tokens = s.take_tokens();
  for (size_t i = 0; i < tokens.size(); ++i) {
    val t = val::object();
    t.set("token", tokens[i].token);
    t.set("text", tokens[i].text);
    out.set(i, t);
  }
  return out;
}

val take_result(Session& s) { return to_js(s.take_result()); }

val info(Session& s) {
  return answer([&] { return to_js(s.info()); });
}

val tokenize(Session& s, const std::string& text, bool add_special, bool parse_special) {
  return answer([&] {
    const std::vector<int32_t> ids = s.tokenize(text, add_special, parse_special);
    val array = val::global("Int32Array").new_(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) array.set(i, ids[i]);
    return array;
  });
}

val detokenize(Session& s, const val& tokens) {
  return answer([&] { return val(s.detokenize(int_array(tokens))); });
}

val reset(Session& s) {
  return answer([&] {
    s.reset();
    return val::undefined();
  });
}

val warm_up(Session& s, double milliseconds) {
  return answer([&] {
    s.warm_up(milliseconds);
    return val::undefined();
  });
}

// Cheap enough to call every ~100 ms while a request runs: per stream unit,
// its name and size, its loads in the running (or last) request, whether it
// stays resident, and whether that request has used it yet.
val live_units(Session& s) {
  const LoaderStats stats = s.live_loader_stats();
  std::vector<LiveUnit> units;
  for (const UnitCounters& c : stats.units) units.push_back({c.name, c.bytes, c.loads, c.resident, false});
  for (const UnitEvent& e : stats.timeline) {
    if (e.unit >= 0 && static_cast<size_t>(e.unit) < units.size()) units[static_cast<size_t>(e.unit)].used = true;
  }
  return to_js(units);
}

val stats(Session& s) {
  return answer([&] {
    return to_js(SessionStats{s.loader_stats(), s.kv_cache_bytes(), emscripten_get_heap_size(), s.source_stats(),
                              s.last_generation()});
  });
}

// Where the session's probe lies in the WebAssembly memory (SessionProbe in
// session.h; web/src/probe.ts reads it).
double probe_address(Session& s) { return static_cast<double>(reinterpret_cast<uintptr_t>(&s.probe())); }

// A test's hook: see Session::hold_jobs.
val hold_jobs(Session& s, bool held) {
  return answer([&] {
    s.hold_jobs(held);
    return val::undefined();
  });
}

// A test's hook: see Session::hold_engine_lock.
void hold_engine_lock(Session& s, double milliseconds) { s.hold_engine_lock(milliseconds); }

int cancel(Session& s) { return s.cancel(); }
void end_warm_up(Session& s) { s.end_warm_up(); }
void close(Session& s) { s.close(); }
bool busy(Session& s) { return s.busy(); }

val list_cached_models_js(int store_id) {
  return answer([&] {
    const std::shared_ptr<CacheStore> store = make_js_store(store_id);
    return to_js(list_cached_models(*store));
  });
}

val delete_cached_model_js(int store_id, const std::string& url) {
  return answer([&] {
    delete_cached_model(*make_js_store(store_id), url);
    return val::undefined();
  });
}

val json_schema_to_grammar_js(const std::string& schema) {
  return answer([&] { return val(json_schema_to_grammar(schema)); });
}

val check_generate_options_js(const val& options, int n_vocab) {
  return answer([&] {
    generate_options(options, n_vocab);
    return val::undefined();
  });
}

val json_object_grammar_js() {
  return answer([&] { return val(json_object_grammar()); });
}

val tool_call_grammar_js(const std::string& call_schema, const std::string& open, const std::string& close,
                         bool parallel) {
  return answer([&] { return val(tool_call_grammar(call_schema, open, close, parallel)); });
}

// The engine's threads reach this one through Emscripten's queue of calls
// (the events, the range requests), which announces itself with a single
// message when it turns non-empty; a handler that threw or a message that
// went astray would leave every later call waiting. The worker also runs the
// queue from its poll while a job runs, so a job never depends on that
// message alone.
void run_queued_calls() {
#if SIPLLM_WASM_THREADS
  emscripten_main_thread_process_queued_calls();
#endif
}

}  // namespace
}  // namespace sipllm::wasm

EMSCRIPTEN_BINDINGS(sipllm) {
  using namespace sipllm::wasm;
#define SIPLLM_METHOD(js_name, fn, ts, doc) .function(#js_name, &fn)
  emscripten::class_<Session>("Session").constructor<int>() SIPLLM_SESSION_METHODS(SIPLLM_METHOD);
#undef SIPLLM_METHOD
#define SIPLLM_FUNCTION(js_name, fn, ts, doc) emscripten::function(#js_name, &fn);
  SIPLLM_MODULE_FUNCTIONS(SIPLLM_FUNCTION)
#undef SIPLLM_FUNCTION
  emscripten::constant("threaded", static_cast<bool>(SIPLLM_WASM_THREADS));
}
