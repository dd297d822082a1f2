// JSON Schema to GBNF, after llama.cpp's json-schema-to-grammar: the same
// rule structure (one rule per property's key and value, optional
// properties chained so that each appears at most once and in the schema's
// order), the same primitives and whitespace, and the same default of no
// additional properties. Where llama.cpp silently drops a keyword that
// constrains the value, this refuses the schema instead, so that every
// document the grammar allows is valid under the schema.
#include "text/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "sipllm/error.h"
#include "sipllm/grammar.h"
#include "text/grammar.h"

namespace sipllm {

std::string gbnf_literal(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      static const char kHex[] = "0123456789ABCDEF";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

namespace {

constexpr uint32_t kUnbounded = UINT32_MAX;
constexpr int kMaxVisitDepth = 128;
// Integer bounds are handled as decimal strings; beyond this many digits a
// bound is refused (or, where it cannot bind the generated numbers of at
// most 16 digits, dropped).
constexpr size_t kMaxBoundDigits = 40;

// One blank, or up to two newlines and an indent of up to 20, or nothing:
// llama.cpp's `space`, which lets a model lay JSON out as it learned to
// without letting whitespace run on for ever.
const char* const kSpaceRule = R"(| " " | "\n"{1,2} [ \t]{0,20})";

struct Primitive {
  const char* body;
  std::vector<const char*> deps;
};

const std::map<std::string, Primitive>& primitives() {
  static const std::map<std::string, Primitive> kPrimitives = {
      {"boolean", {R"(("true" | "false") space)", {}}},
      {"null", {R"("null" space)", {}}},
      {"decimal-part", {"[0-9]{1,16}", {}}},
      {"integral-part", {"[0] | [1-9] [0-9]{0,15}", {}}},
      {"number",
       {R"(("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)? space)",
        {"integral-part", "decimal-part"}}},
      {"integer", {R"(("-"? integral-part) space)", {"integral-part"}}},
      {"value",
       {"object | array | string | number | boolean | null",
        {"object", "array", "string", "number", "boolean", "null"}}},
      {"object",
       {R"("{" space ( string ":" space value ("," space string ":" space value)* )? "}" space)",
        {"string", "value"}}},
      {"array", {R"("[" space ( value ("," space value)* )? "]" space)", {"value"}}},
      // Any character but a quote, a backslash and the control characters
      // (DEL too, as llama.cpp), or an escape.
      {"char", {R"([^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4}))", {}}},
      {"string", {R"("\"" char* "\"" space)", {"char"}}},
      {"uuid",
       {R"("\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12} "\"" space)",
        {}}},
      {"date", {R"([0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] ))", {}}},
      {"time",
       {R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? ( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
        {}}},
      {"date-time", {R"(date "T" time)", {"date", "time"}}},
      {"date-string", {R"("\"" date "\"" space)", {"date"}}},
      {"time-string", {R"("\"" time "\"" space)", {"time"}}},
      {"date-time-string", {R"("\"" date-time "\"" space)", {"date-time"}}},
  };
  return kPrimitives;
}

// Keywords that never constrain a value.
const std::set<std::string>& annotations() {
  static const std::set<std::string> kAnnotations = {
      "title",    "description", "default",  "examples",        "example",          "$schema",
      "$id",      "$comment",    "deprecated", "readOnly",      "writeOnly",        "$anchor",
      "$dynamicAnchor", "$vocabulary", "contentEncoding", "contentMediaType", "contentSchema",
      "$defs",    "definitions",
      // OpenAPI's, which Pydantic and others write beside oneOf and elsewhere.
      "discriminator", "externalDocs", "xml"};
  return kAnnotations;
}

// Keywords that constrain a value but are not compiled, with why.
const std::map<std::string, std::string>& refused() {
  static const std::map<std::string, std::string> kRefused = {
      {"pattern", "regular expressions are not compiled"},
      {"patternProperties", "property names by regular expression are not compiled"},
      {"propertyNames", ""},
      {"minProperties", ""},
      {"maxProperties", ""},
      {"uniqueItems", "a grammar cannot compare items"},
      {"contains", ""},
      {"minContains", ""},
      {"maxContains", ""},
      {"not", ""},
      {"if", ""},
      {"then", ""},
      {"else", ""},
      {"dependentRequired", ""},
      {"dependentSchemas", ""},
      {"dependencies", ""},
      {"unevaluatedProperties", ""},
      {"unevaluatedItems", ""},
      {"multipleOf", ""},
      {"$dynamicRef", ""},
      {"$recursiveRef", ""},
      {"$recursiveAnchor", ""},
      {"nullable", "it is OpenAPI's, not JSON Schema's: write \"type\": [\"...\", \"null\"]"},
  };
  return kRefused;
}

// Keywords compiled, by the type they apply to ("" for any).
const std::map<std::string, std::string>& handled() {
  static const std::map<std::string, std::string> kHandled = {
      {"type", ""},         {"enum", ""},          {"const", ""},           {"anyOf", ""},
      {"oneOf", ""},        {"allOf", ""},         {"$ref", ""},            {"properties", "object"},
      {"required", "object"}, {"additionalProperties", "object"}, {"items", "array"},
      {"prefixItems", "array"}, {"additionalItems", "array"}, {"minItems", "array"}, {"maxItems", "array"},
      {"minLength", "string"}, {"maxLength", "string"}, {"format", "string"}, {"minimum", "number"},
      {"maximum", "number"}, {"exclusiveMinimum", "number"}, {"exclusiveMaximum", "number"},
  };
  return kHandled;
}

bool type_known(const std::string& t) {
  return t == "string" || t == "number" || t == "integer" || t == "boolean" || t == "null" || t == "object" ||
         t == "array";
}

bool value_has_type(const JsonValue& v, const std::string& t) {
  if (t == "string") return v.is_string();
  if (t == "number") return v.is_number();
  if (t == "integer") return v.is_integer();
  if (t == "boolean") return v.is_bool();
  if (t == "null") return v.is_null();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  return false;
}

std::string sanitize(const std::string& name) {
  std::string out;
  bool in_run = false;
  for (char c : name) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-') {
      out += c;
      in_run = false;
    } else if (!in_run) {
      out += '-';
      in_run = true;
    }
  }
  return out;
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? separator : "") + parts[i];
  return out;
}

// A class of one code point, written so the grammar reader cannot mistake it.
std::string char_class(uint32_t cp) {
  if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9')) {
    return std::string("[") + static_cast<char>(cp) + "]";
  }
  char buf[16];
  std::snprintf(buf, sizeof buf, cp < 0x100 ? "[\\x%02X]" : cp < 0x10000 ? "[\\u%04X]" : "[\\U%08X]", cp);
  return buf;
}

std::string escaped_class_member(uint32_t cp) {
  std::string c = char_class(cp);
  return c.substr(1, c.size() - 2);
}

std::vector<uint32_t> code_points(std::string_view utf8) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < utf8.size();) {
    const auto c = static_cast<unsigned char>(utf8[i]);
    const int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len && i + static_cast<size_t>(k) < utf8.size(); ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(utf8[i + static_cast<size_t>(k)]) & 0x3F);
    }
    out.push_back(cp);
    i += static_cast<size_t>(len);
  }
  return out;
}

// --- integers as decimal strings, for minimum/maximum -----------------------

struct Int {
  bool negative = false;
  std::string digits = "0";  // no leading zeros
};

bool all_of(const std::string& s, char c) { return std::all_of(s.begin(), s.end(), [c](char x) { return x == c; }); }

int compare_magnitude(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

int compare(const Int& a, const Int& b) {
  const bool an = a.negative && a.digits != "0", bn = b.negative && b.digits != "0";
  if (an != bn) return an ? -1 : 1;
  const int m = compare_magnitude(a.digits, b.digits);
  return an ? -m : m;
}

std::string increment(std::string d) {
  for (size_t i = d.size(); i-- > 0;) {
    if (d[i] < '9') {
      ++d[i];
      return d;
    }
    d[i] = '0';
  }
  return "1" + d;
}

std::string decrement(std::string d) {  // d > 0
  for (size_t i = d.size(); i-- > 0;) {
    if (d[i] > '0') {
      --d[i];
      break;
    }
    d[i] = '9';
  }
  const size_t nz = d.find_first_not_of('0');
  return nz == std::string::npos ? "0" : d.substr(nz);
}

Int plus_one(Int v) {
  if (!v.negative || v.digits == "0") return Int{false, increment(v.digits)};
  v.digits = decrement(v.digits);
  if (v.digits == "0") v.negative = false;
  return v;
}

Int minus_one(Int v) {
  if (v.negative) return Int{true, increment(v.digits)};
  if (v.digits == "0") return Int{true, "1"};
  return Int{false, decrement(v.digits)};
}

// The nearest integer at or above (ceil) or at or below a JSON number, from
// its text; nullopt when it has more than kMaxBoundDigits digits.
std::optional<Int> to_int(const std::string& text, bool ceil) {
  size_t i = 0;
  Int v;
  if (text[i] == '-') {
    v.negative = true;
    ++i;
  }
  std::string digits;
  long exponent = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') digits += text[i++];
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      digits += text[i++];
      --exponent;
    }
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    long e = std::strtol(text.c_str() + i + 1, nullptr, 10);
    if (e > 1000) return std::nullopt;
    if (e < -1000) e = -1000000;  // far below one: only whether it is zero matters
    exponent += e;
  }
  const size_t nz = digits.find_first_not_of('0');
  if (nz == std::string::npos) return Int{};
  digits = digits.substr(nz);
  bool fraction = false;
  if (exponent >= 0) {
    if (digits.size() + static_cast<size_t>(exponent) > kMaxBoundDigits) return std::nullopt;
    digits += std::string(static_cast<size_t>(exponent), '0');
  } else {
    const size_t drop = static_cast<size_t>(-exponent);
    if (drop >= digits.size()) {
      fraction = true;
      digits = "0";
    } else {
      fraction = digits.find_first_not_of('0', digits.size() - drop) != std::string::npos;
      digits = digits.substr(0, digits.size() - drop);
    }
  }
  if (digits.size() > kMaxBoundDigits) return std::nullopt;
  v.digits = digits;
  if (v.digits == "0") v.negative = v.negative && fraction;
  // Truncation moved the value toward zero; move it back where asked.
  if (fraction && ceil != v.negative) v.digits = increment(v.digits);
  if (v.digits == "0") v.negative = false;
  return v;
}

std::string digit_class(char from, char to) {
  return from == to ? std::string("[") + from + "]" : std::string("[") + from + "-" + to + "]";
}

std::string any_digits(size_t n) {
  if (n == 1) return "[0-9]";
  return "[0-9]{" + std::to_string(n) + "}";
}

// Numbers written with exactly lo.size() digits from lo to hi.
std::string same_length_range(const std::string& lo, const std::string& hi) {
  if (lo == hi) return gbnf_literal(lo);
  size_t i = 0;
  while (lo[i] == hi[i]) ++i;
  const std::string prefix = lo.substr(0, i);
  const size_t rest = lo.size() - i - 1;
  std::string body;
  if (rest == 0) {
    body = digit_class(lo[i], hi[i]);
  } else {
    const std::string lo_rest = lo.substr(i + 1), hi_rest = hi.substr(i + 1);
    const bool lo_full = all_of(lo_rest, '0'), hi_full = all_of(hi_rest, '9');
    std::vector<std::string> alternatives;
    if (!lo_full) alternatives.push_back(digit_class(lo[i], lo[i]) + " (" + same_length_range(lo_rest, std::string(rest, '9')) + ")");
    const char first = static_cast<char>(lo_full ? lo[i] : lo[i] + 1);
    const char last = static_cast<char>(hi_full ? hi[i] : hi[i] - 1);
    if (first <= last) alternatives.push_back(digit_class(first, last) + " " + any_digits(rest));
    if (!hi_full) alternatives.push_back(digit_class(hi[i], hi[i]) + " (" + same_length_range(std::string(rest, '0'), hi_rest) + ")");
    body = join(alternatives, " | ");
  }
  return (prefix.empty() ? "" : gbnf_literal(prefix) + " ") + "(" + body + ")";
}

// Non-negative numbers from lo to hi (no hi: up to 16 digits, as the
// integer primitive), without leading zeros.
std::string magnitude_range(const std::string& lo, const std::optional<std::string>& hi) {
  const size_t lo_len = lo.size();
  const std::string top = hi ? *hi : std::string(std::max<size_t>(lo_len, 16), '9');
  const size_t hi_len = top.size();
  if (lo_len == hi_len) return same_length_range(lo, top);
  std::vector<std::string> alternatives = {same_length_range(lo, std::string(lo_len, '9'))};
  // Every number of the lengths in between (and of the last, if `top` is
  // all nines) in one alternative.
  const bool top_full = all_of(top, '9');
  const size_t last_full = top_full ? hi_len : hi_len - 1;
  if (last_full > lo_len) {
    const size_t from = lo_len, to = last_full - 1;  // digits after the first
    alternatives.push_back("[1-9] [0-9]{" + std::to_string(from) + (to == from ? "" : "," + std::to_string(to)) + "}");
  }
  if (!top_full) alternatives.push_back(same_length_range("1" + std::string(hi_len - 1, '0'), top));
  return join(alternatives, " | ");
}

}  // namespace

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const JsonValue& root) : root_(root) { rules_["space"] = kSpaceRule; }

  // With `wrap`, the root is what it makes of the document's rule name.
  std::string run(const RootWrap& wrap) {
    const std::string top = visit(root_, "", "");
    if (wrap) {
      // The document's rule under a name the schema did not take.
      std::string call = "call";
      for (int n = 1; rules_.count(call) != 0; ++n) call = "call-" + std::to_string(n);
      rules_[call] = top == "root" ? rules_["root"] : top;
      rules_["root"] = wrap(call);
    } else if (top != "root") {
      rules_["root"] = top;
    }
    std::string out;
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  [[noreturn]] void invalid(const std::string& path, const std::string& message) const {
    throw Error(ErrorKind::kInvalidArgument, "JSON schema" + where(path) + ": " + message);
  }
  [[noreturn]] void unsupported(const std::string& path, const std::string& message) const {
    throw Error(ErrorKind::kUnsupported, "JSON schema" + where(path) + ": " + message);
  }
  static std::string where(const std::string& path) { return path.empty() ? "" : " at " + path; }

  std::string add_rule(const std::string& name, const std::string& body) {
    const std::string key = sanitize(name);
    auto it = rules_.find(key);
    if (it == rules_.end() || it->second == body) {
      rules_[key] = body;
      return key;
    }
    for (int i = 0;; ++i) {
      const std::string k = key + std::to_string(i);
      auto j = rules_.find(k);
      if (j == rules_.end() || j->second == body) {
        rules_[k] = body;
        return k;
      }
    }
  }

  std::string add_primitive(const std::string& name, const std::string& primitive) {
    const Primitive& p = primitives().at(primitive);
    const std::string rule = add_rule(name, p.body);
    for (const char* dep : p.deps) {
      if (rules_.find(dep) == rules_.end()) add_primitive(dep, dep);
    }
    return rule;
  }

  // The root takes the primitive's body; elsewhere the primitive's own rule
  // is shared, as in llama.cpp.
  std::string primitive_rule(const std::string& rule_name, const std::string& primitive) {
    return add_primitive(rule_name == "root" ? "root" : primitive, primitive);
  }

  static bool reserved(const std::string& name) { return name == "root" || primitives().count(name) != 0; }

  void check_keywords(const JsonValue& schema, const std::string& path) const {
    for (const auto& [key, value] : schema.members) {
      if (annotations().count(key) != 0 || key.rfind("x-", 0) == 0 || handled().count(key) != 0) continue;
      const auto r = refused().find(key);
      if (r != refused().end()) {
        unsupported(path, "keyword '" + key + "' is not supported" + (r->second.empty() ? "" : ": " + r->second));
      }
      unsupported(path, "unknown keyword '" + key + "' (refused rather than ignored, in case it constrains the value)");
    }
  }

  // Refuses constraining keywords beside `what` other than `allowed`.
  void only_beside(const JsonValue& schema, const std::string& what, const std::set<std::string>& allowed,
                   const std::string& path) const {
    for (const auto& [key, value] : schema.members) {
      if (key == what || allowed.count(key) != 0 || handled().count(key) == 0) continue;
      unsupported(path, "keyword '" + key + "' beside '" + what + "' is not supported");
    }
  }

  uint32_t count(const JsonValue& schema, const char* key, uint32_t fallback, const std::string& path) const {
    const JsonValue* v = schema.find(key);
    if (v == nullptr) return fallback;
    if (!v->is_integer() || v->number < 0) invalid(path, std::string("'") + key + "' must be a non-negative integer");
    if (v->number > Grammar::kMaxRepetition) {
      unsupported(path, std::string("'") + key + "' above " + std::to_string(Grammar::kMaxRepetition) + " is not supported");
    }
    return static_cast<uint32_t>(v->number);
  }

  // `item` min..max times, separated by `separator` (as llama.cpp writes it).
  static std::string repetition(const std::string& item, uint32_t min, uint32_t max, const std::string& separator) {
    if (max == 0) return "";
    if (min == 0 && max == 1) return item + "?";
    if (separator.empty()) {
      if (min == 1 && max == kUnbounded) return item + "+";
      if (min == 0 && max == kUnbounded) return item + "*";
      return item + "{" + std::to_string(min) + "," + (max == kUnbounded ? "" : std::to_string(max)) + "}";
    }
    std::string result = item + " " +
                         repetition("(" + separator + " " + item + ")", min == 0 ? 0 : min - 1,
                                    max == kUnbounded ? kUnbounded : max - 1, "");
    if (min == 0) result = "(" + result + ")?";
    return result;
  }

  const JsonValue& resolve_pointer(const std::string& ref, const std::string& path) const {
    std::string pointer;
    for (size_t i = 1; i < ref.size(); ++i) {  // percent-decoding, as in a URI fragment
      if (ref[i] == '%' && i + 2 < ref.size() && std::isxdigit(static_cast<unsigned char>(ref[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(ref[i + 2]))) {
        pointer += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        pointer += ref[i];
      }
    }
    const JsonValue* node = &root_;
    if (pointer.empty()) return *node;
    if (pointer[0] != '/') unsupported(path, "$ref '" + ref + "': anchors are not supported, only JSON pointers ('#/...')");
    size_t start = 1;
    while (true) {
      const size_t slash = pointer.find('/', start);
      std::string token = pointer.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
      std::string unescaped;
      for (size_t i = 0; i < token.size(); ++i) {
        if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
          unescaped += token[i + 1] == '0' ? '~' : '/';
          ++i;
        } else {
          unescaped += token[i];
        }
      }
      const JsonValue* next = nullptr;
      if (node->is_object()) {
        next = node->find(unescaped);
      } else if (node->is_array() && !unescaped.empty() &&
                 unescaped.find_first_not_of("0123456789") == std::string::npos && unescaped.size() < 10) {
        const size_t index = std::stoul(unescaped);
        if (index < node->items.size()) next = &node->items[index];
      }
      if (next == nullptr) invalid(path, "$ref '" + ref + "' points to nothing");
      node = next;
      if (slash == std::string::npos) return *node;
      start = slash + 1;
    }
  }

  std::string resolve_ref(const JsonValue& ref_value, const std::string& path) {
    if (!ref_value.is_string()) invalid(path, "'$ref' must be a string");
    const std::string& ref = ref_value.text;
    if (ref.empty() || ref[0] != '#') {
      unsupported(path, "$ref '" + ref + "': only references inside the schema ('#/...') are supported");
    }
    const auto known = ref_rules_.find(ref);
    if (known != ref_rules_.end()) return known->second;  // a recursive reference, or one seen before
    const JsonValue& target = resolve_pointer(ref, path);
    std::string name = sanitize("ref" + ref.substr(1));
    for (int i = 0; used_ref_names_.count(name) != 0 || rules_.count(name) != 0; ++i) {
      name = sanitize("ref" + ref.substr(1)) + std::to_string(i);
    }
    used_ref_names_.insert(name);
    ref_rules_[ref] = name;  // before visiting: the target may refer to itself
    const std::string got = visit(target, name, ref.substr(1));
    if (got != name) rules_[name] = got;
    return name;
  }

  std::string visit(const JsonValue& schema, const std::string& name, const std::string& path) {
    struct Depth {
      int& d;
      explicit Depth(int& depth) : d(++depth) {}
      ~Depth() { --d; }
    } depth(depth_);
    if (depth_ > kMaxVisitDepth) invalid(path, "the schema nests deeper than " + std::to_string(kMaxVisitDepth));

    const std::string rule_name = reserved(name) ? name + "-" : name.empty() ? "root" : name;
    const std::string prefix = name.empty() ? "" : name + "-";
    if (schema.is_bool()) {
      if (!schema.boolean) invalid(path, "the schema false allows no value");
      return primitive_rule(rule_name, "value");
    }
    if (!schema.is_object()) {
      invalid(path, std::string("a schema must be an object or a boolean, not ") + json_type_name(schema.type));
    }
    check_keywords(schema, path);

    if (const JsonValue* ref = schema.find("$ref")) {
      only_beside(schema, "$ref", {}, path);
      return add_rule(rule_name, resolve_ref(*ref, path));
    }
    const JsonValue* any_of = schema.find("anyOf");
    const JsonValue* one_of = schema.find("oneOf");
    if (any_of != nullptr || one_of != nullptr) {
      if (any_of != nullptr && one_of != nullptr) unsupported(path, "'anyOf' and 'oneOf' together are not supported");
      const std::string keyword = any_of != nullptr ? "anyOf" : "oneOf";
      const JsonValue& alternatives = any_of != nullptr ? *any_of : *one_of;
      only_beside(schema, keyword, {}, path);
      if (!alternatives.is_array() || alternatives.items.empty()) invalid(path, "'" + keyword + "' must be a non-empty array");
      std::vector<std::string> rules;
      for (size_t i = 0; i < alternatives.items.size(); ++i) {
        rules.push_back(visit(alternatives.items[i], (name.empty() ? "alternative-" : name + "-") + std::to_string(i),
                              path + "/" + keyword + "/" + std::to_string(i)));
      }
      return add_rule(rule_name, join(rules, " | "));
    }
    if (const JsonValue* all_of = schema.find("allOf")) {
      only_beside(schema, "allOf", {}, path);
      if (!all_of->is_array() || all_of->items.empty()) invalid(path, "'allOf' must be a non-empty array");
      if (all_of->items.size() > 1) {
        unsupported(path, "'allOf' with more than one schema is not supported (one, as Pydantic writes around a $ref, is)");
      }
      return visit(all_of->items[0], name, path + "/allOf/0");
    }

    std::vector<std::string> types;
    if (const JsonValue* type = schema.find("type")) {
      if (type->is_string()) {
        types.push_back(type->text);
      } else if (type->is_array() && !type->items.empty()) {
        for (const JsonValue& t : type->items) {
          if (!t.is_string()) invalid(path, "'type' must be a string or an array of strings");
          types.push_back(t.text);
        }
      } else {
        invalid(path, "'type' must be a string or a non-empty array of strings");
      }
      for (const std::string& t : types) {
        if (!type_known(t)) invalid(path, "unknown type '" + t + "'");
      }
    }
    if (types.size() > 1) {
      // One alternative per type; each type ignores the others' keywords.
      std::vector<std::string> rules;
      for (size_t i = 0; i < types.size(); ++i) {
        JsonValue copy = schema;
        for (auto& [key, value] : copy.members) {
          if (key == "type") {
            value = JsonValue{};
            value.type = JsonValue::Type::kString;
            value.text = types[i];
          }
        }
        rules.push_back(visit(copy, (name.empty() ? "alternative-" : name + "-") + std::to_string(i), path));
      }
      return add_rule(rule_name, join(rules, " | "));
    }
    const std::string type = types.empty() ? "" : types[0];

    if (const JsonValue* constant = schema.find("const")) {
      only_beside(schema, "const", {"type", "enum"}, path);
      if (!type.empty() && !value_has_type(*constant, type)) invalid(path, "'const' is not of type '" + type + "'");
      if (const JsonValue* values = schema.find("enum")) {
        bool listed = false;
        for (const JsonValue& v : values->is_array() ? values->items : std::vector<JsonValue>{}) {
          listed = listed || to_json(v) == to_json(*constant);
        }
        if (!listed) invalid(path, "'const' is not among the 'enum' values");
      }
      return add_rule(rule_name, gbnf_literal(to_json(*constant)) + " space");
    }
    if (const JsonValue* values = schema.find("enum")) {
      only_beside(schema, "enum", {"type"}, path);
      if (!values->is_array()) invalid(path, "'enum' must be an array");
      std::vector<std::string> literals;
      for (const JsonValue& v : values->items) {
        if (type.empty() || value_has_type(v, type)) literals.push_back(gbnf_literal(to_json(v)));
      }
      if (literals.empty()) invalid(path, "no 'enum' value" + (type.empty() ? std::string() : " of type '" + type + "'"));
      return add_rule(rule_name, "(" + join(literals, " | ") + ") space");
    }

    std::string kind = type;
    if (kind.empty()) {
      // No type: the keywords tell. Keywords of several types would leave
      // each type its own constraints; that is refused.
      std::set<std::string> kinds;
      std::vector<std::string> keys;
      for (const auto& [key, value] : schema.members) {
        const auto h = handled().find(key);
        if (h != handled().end() && !h->second.empty()) {
          kinds.insert(h->second);
          keys.push_back(key);
        }
      }
      if (kinds.size() > 1) {
        unsupported(path, "keywords of several types (" + join(keys, ", ") + ") without 'type': give 'type'");
      }
      if (kinds.empty()) return primitive_rule(rule_name, "value");
      kind = *kinds.begin();
    }

    if (kind == "object") return object_rule(schema, rule_name, name, prefix, path);
    if (kind == "array") return array_rule(schema, rule_name, name, prefix, path);
    if (kind == "string") return string_rule(schema, rule_name, path);
    if (kind == "integer" || kind == "number") {
      const bool bounded = schema.find("minimum") || schema.find("maximum") || schema.find("exclusiveMinimum") ||
                           schema.find("exclusiveMaximum");
      if (!bounded) return primitive_rule(rule_name, kind == "integer" ? "integer" : "number");
      if (kind == "number") {
        unsupported(path, "minimum/maximum on type 'number' are not supported (on 'integer' they are, as in llama.cpp)");
      }
      return add_rule(rule_name, "(" + integer_range(schema, path) + ") space");
    }
    return primitive_rule(rule_name, kind);  // boolean, null
  }

  std::string integer_range(const JsonValue& schema, const std::string& path) {
    std::optional<Int> lo, hi;
    bool lo_dropped = false, hi_dropped = false;
    auto bound = [&](const char* key, bool lower, bool exclusive_flag) {
      const JsonValue* v = schema.find(key);
      if (v == nullptr || v->is_bool()) return;
      if (!v->is_number()) invalid(path, std::string("'") + key + "' must be a number");
      bool exclusive = exclusive_flag;
      // Draft 4 writes exclusiveMinimum: true beside minimum.
      const JsonValue* flag = schema.find(lower ? "exclusiveMinimum" : "exclusiveMaximum");
      if (!exclusive && flag != nullptr && flag->is_bool() && flag->boolean) exclusive = true;
      // ceil for a lower bound, floor for an upper one; exclusive moves one more.
      std::optional<Int> value = to_int(v->text, lower != exclusive);
      if (!value) {
        const bool harmless = lower == (v->number < 0);  // -1e50 as a minimum binds nothing
        if (!harmless) unsupported(path, std::string("'") + key + "' beyond 40 digits is not supported");
        (lower ? lo_dropped : hi_dropped) = true;
        return;
      }
      if (exclusive) value = lower ? plus_one(*value) : minus_one(*value);
      std::optional<Int>& slot = lower ? lo : hi;
      if (!slot || (lower ? compare(*value, *slot) > 0 : compare(*value, *slot) < 0)) slot = value;
    };
    bound("minimum", true, false);
    bound("exclusiveMinimum", true, true);
    bound("maximum", false, false);
    bound("exclusiveMaximum", false, true);
    (void)lo_dropped;
    (void)hi_dropped;
    if (lo && hi && compare(*lo, *hi) > 0) invalid(path, "no integer lies between the minimum and the maximum");

    std::vector<std::string> alternatives;
    const Int zero;
    // Negative numbers: "-" and a magnitude.
    if (!lo || compare(*lo, zero) < 0) {
      const std::string mag_lo = hi && compare(*hi, zero) < 0 ? hi->digits : "1";
      const std::optional<std::string> mag_hi = lo ? std::optional<std::string>(lo->digits) : std::nullopt;
      if (!mag_hi || compare_magnitude(mag_lo, *mag_hi) <= 0) {
        alternatives.push_back("\"-\" (" + magnitude_range(mag_lo, mag_hi) + ")");
      }
    }
    if (!hi || compare(*hi, zero) >= 0) {
      const std::string from = lo && compare(*lo, zero) > 0 ? lo->digits : "0";
      const std::optional<std::string> to = hi ? std::optional<std::string>(hi->digits) : std::nullopt;
      if (!to || compare_magnitude(from, *to) <= 0) alternatives.push_back(magnitude_range(from, to));
    }
    return join(alternatives, " | ");
  }

  // A JSON string that is none of `names` (as written in JSON, escapes
  // included): a trie of the names, each node one rule, where leaving the
  // trie on a different character (or after a whole name, on any) goes on
  // as a free string. As llama.cpp's, with an empty continuation allowed
  // after a proper prefix of a name, and the first differing character
  // written as a JSON `char` (no raw backslash or control character).
  std::string not_strings(const std::vector<std::string>& names, const std::string& rule_prefix) {
    struct Node {
      std::map<uint32_t, size_t> children;
      bool end = false;
    };
    std::vector<Node> trie(1);
    for (const std::string& name : names) {
      size_t node = 0;
      for (uint32_t cp : code_points(name)) {
        auto it = trie[node].children.find(cp);
        if (it == trie[node].children.end()) {
          trie.push_back(Node{});
          it = trie[node].children.emplace(cp, trie.size() - 1).first;
        }
        node = it->second;
      }
      trie[node].end = true;
    }
    const std::string ch = add_primitive("char", "char");
    // Each node's rule: the rest of a string that has matched the node's prefix.
    std::vector<std::string> rule_names(trie.size());
    for (size_t n = trie.size(); n-- > 0;) {  // children were created after their parent
      std::vector<std::string> alternatives;
      std::string others;
      for (const auto& [cp, child] : trie[n].children) {
        others += escaped_class_member(cp);
        const Node& c = trie[child];
        if (c.children.empty()) {
          alternatives.push_back(char_class(cp) + " " + ch + "+");  // a whole name: something must follow
        } else {
          alternatives.push_back(char_class(cp) + " " + rule_names[child] + (c.end ? "" : "?"));
        }
      }
      alternatives.push_back("( [^\"\\\\\\x7F\\x00-\\x1F" + others + "] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4}) ) " + ch + "*");
      rule_names[n] = add_rule(rule_prefix + std::to_string(n), join(alternatives, " | "));
    }
    return "[\"] " + rule_names[0] + (trie[0].end ? "" : "?") + " [\"] space";
  }

  std::string object_rule(const JsonValue& schema, const std::string& rule_name, const std::string& name,
                          const std::string& prefix, const std::string& path) {
    static const JsonValue kAnything = [] {
      JsonValue v;
      v.type = JsonValue::Type::kBool;
      v.boolean = true;
      return v;
    }();
    const JsonValue* properties = schema.find("properties");
    if (properties != nullptr && !properties->is_object()) invalid(path, "'properties' must be an object");
    std::vector<std::string> required;
    if (const JsonValue* r = schema.find("required")) {
      if (!r->is_array()) invalid(path, "'required' must be an array of strings");
      for (const JsonValue& item : r->items) {
        if (!item.is_string()) invalid(path, "'required' must be an array of strings");
        if (std::find(required.begin(), required.end(), item.text) == required.end()) required.push_back(item.text);
      }
    }
    const JsonValue* additional = schema.find("additionalProperties");
    if (additional != nullptr && !additional->is_bool() && !additional->is_object()) {
      invalid(path, "'additionalProperties' must be a boolean or a schema");
    }
    // What other keys may hold: none (false, or absent beside 'properties',
    // llama.cpp's default), anything (true, or no 'properties' at all), or
    // values of a schema.
    const JsonValue* extra = nullptr;
    if (additional != nullptr) {
      if (additional->is_object() || additional->boolean) extra = additional;
    } else if (properties == nullptr) {
      extra = &kAnything;
    }

    struct Property {
      std::string key;
      const JsonValue* schema;
      std::string path;
    };
    std::vector<Property> props;
    if (properties != nullptr) {
      for (const auto& [key, value] : properties->members) {
        props.push_back({key, &value, path + "/properties/" + key});
      }
    }
    for (const std::string& key : required) {
      const bool listed = std::any_of(props.begin(), props.end(), [&](const Property& p) { return p.key == key; });
      if (listed) continue;
      // Required but not described: its value is whatever other keys may hold.
      if (extra == nullptr) {
        invalid(path, "required property '" + key + "' is not in 'properties' and 'additionalProperties' is false");
      }
      props.push_back({key, extra, path + "/additionalProperties"});
    }
    if (props.empty() && extra == &kAnything) return primitive_rule(rule_name, "object");

    struct Entry {
      std::string kv;     // its key-value rule
      std::string label;  // for rule names
      bool many = false;  // the additional properties: any number of them
    };
    std::vector<Entry> required_entries, optional_entries;
    std::vector<std::string> names;
    for (const Property& p : props) {
      if (std::find(names.begin(), names.end(), p.key) != names.end()) continue;
      const std::string value_rule = visit(*p.schema, prefix + p.key, p.path);
      Entry e;
      e.kv = add_rule(prefix + p.key + "-kv", gbnf_literal(json_quote(p.key)) + " space \":\" space " + value_rule);
      e.label = p.key;
      const bool is_required = std::find(required.begin(), required.end(), p.key) != required.end();
      (is_required ? required_entries : optional_entries).push_back(e);
      names.push_back(p.key);
    }
    if (extra != nullptr) {
      const std::string sub = prefix + "additional";
      const std::string value_rule = extra == &kAnything || extra->is_bool()
                                         ? add_primitive("value", "value")
                                         : visit(*extra, sub + "-value", path + "/additionalProperties");
      std::vector<std::string> escaped;
      for (const std::string& n : names) {
        const std::string q = json_quote(n);
        escaped.push_back(q.substr(1, q.size() - 2));
      }
      const std::string key_rule =
          names.empty() ? add_primitive("string", "string") : add_rule(sub + "-k", not_strings(escaped, sub + "-k-"));
      Entry e;
      e.kv = add_rule(sub + "-kv", key_rule + " \":\" space " + value_rule);
      e.label = "additional";
      e.many = true;
      optional_entries.push_back(e);
    }

    std::string rule = "\"{\" space ";
    for (size_t i = 0; i < required_entries.size(); ++i) rule += (i ? " \",\" space " : "") + required_entries[i].kv;
    if (!optional_entries.empty()) {
      // Each optional key at most once, in order: after key i, only keys
      // after it may follow (llama.cpp's "-rest" rules), built from the end
      // (no recursion: a schema may have thousands of properties).
      const size_t n = optional_entries.size();
      std::vector<std::string> rest(n + 1);  // rest[i]: keys i.. as optional continuations
      for (size_t i = n; i-- > 1;) {
        const Entry& e = optional_entries[i];
        std::string body = "( \",\" space " + e.kv + " )" + (e.many ? "*" : "?");
        if (!rest[i + 1].empty()) body += " " + rest[i + 1];
        rest[i] = add_rule(prefix + optional_entries[i - 1].label + "-rest", body);
      }
      auto chain = [&](size_t i) {
        const Entry& e = optional_entries[i];
        std::string res = e.kv + (e.many ? " ( \",\" space " + e.kv + " )*" : "");
        if (!rest[i + 1].empty()) res += " " + rest[i + 1];
        return res;
      };
      rule += " (";
      if (!required_entries.empty()) rule += " \",\" space ( ";
      for (size_t i = 0; i < n; ++i) rule += (i ? " | " : "") + chain(i);
      if (!required_entries.empty()) rule += " )";
      rule += " )?";
    }
    rule += " \"}\" space";
    (void)name;
    return add_rule(rule_name, rule);
  }

  std::string array_rule(const JsonValue& schema, const std::string& rule_name, const std::string& name,
                         const std::string& prefix, const std::string& path) {
    const JsonValue* items = schema.find("items");
    const JsonValue* prefix_items = schema.find("prefixItems");
    const JsonValue* additional_items = schema.find("additionalItems");
    const uint32_t min = count(schema, "minItems", 0, path);
    const uint32_t max = count(schema, "maxItems", kUnbounded, path);
    if (max < min) invalid(path, "'maxItems' is below 'minItems'");
    const JsonValue* tuple = prefix_items != nullptr ? prefix_items : (items != nullptr && items->is_array() ? items : nullptr);
    if (tuple != nullptr) {
      // Exactly the tuple's items, as llama.cpp generates it.
      if (!tuple->is_array()) invalid(path, "'prefixItems' must be an array of schemas");
      if (prefix_items != nullptr && items != nullptr && !(items->is_bool() && !items->boolean)) {
        unsupported(path, "'items' beside 'prefixItems' is not supported (the tuple is generated exactly)");
      }
      if (additional_items != nullptr && !(additional_items->is_bool() && !additional_items->boolean)) {
        unsupported(path, "'additionalItems' other than false is not supported (the tuple is generated exactly)");
      }
      const size_t n = tuple->items.size();
      if (n < min || (max != kUnbounded && n > max)) {
        unsupported(path, "a tuple of " + std::to_string(n) + " items with minItems/maxItems that exclude that length");
      }
      const std::string key = prefix_items != nullptr ? "prefixItems" : "items";
      std::vector<std::string> parts;
      for (size_t i = 0; i < n; ++i) {
        parts.push_back(visit(tuple->items[i], prefix + "tuple-" + std::to_string(i), path + "/" + key + "/" + std::to_string(i)));
      }
      return add_rule(rule_name, "\"[\" space " + join(parts, " \",\" space ") + (n ? " " : "") + "\"]\" space");
    }
    if (items == nullptr && min == 0 && max == kUnbounded) return primitive_rule(rule_name, "array");
    std::string item_rule;
    if (items == nullptr) {
      item_rule = add_primitive("value", "value");
    } else if (items->is_bool() && !items->boolean) {
      if (min > 0) invalid(path, "'items' is false but 'minItems' is above 0");
      return add_rule(rule_name, "\"[\" space \"]\" space");
    } else {
      item_rule = visit(*items, prefix + "item", path + "/items");
    }
    (void)name;
    const std::string body = repetition(item_rule, min, max, "\",\" space");
    return add_rule(rule_name, "\"[\" space " + body + (body.empty() ? "" : " ") + "\"]\" space");
  }

  std::string string_rule(const JsonValue& schema, const std::string& rule_name, const std::string& path) {
    const JsonValue* format = schema.find("format");
    if (format != nullptr && !format->is_string()) invalid(path, "'format' must be a string");
    const bool lengths = schema.find("minLength") != nullptr || schema.find("maxLength") != nullptr;
    if (format != nullptr) {
      const std::string& f = format->text;
      const bool uuid = f == "uuid" || (f.size() == 5 && f.rfind("uuid", 0) == 0 && f[4] >= '1' && f[4] <= '5');
      const bool dated = f == "date" || f == "time" || f == "date-time";
      if ((uuid || dated) && lengths) unsupported(path, "minLength/maxLength beside format '" + f + "' are not supported");
      if (uuid) return primitive_rule(rule_name, "uuid");
      if (dated) return add_rule(rule_name, add_primitive(f + "-string", f + "-string"));
      // Other formats (email, uri, ...) are annotations: any string.
    }
    if (!lengths) return primitive_rule(rule_name, "string");
    const uint32_t min = count(schema, "minLength", 0, path);
    const uint32_t max = count(schema, "maxLength", kUnbounded, path);
    if (max < min) invalid(path, "'maxLength' is below 'minLength'");
    const std::string ch = add_primitive("char", "char");
    const std::string body = repetition(ch, min, max, "");
    return add_rule(rule_name, "\"\\\"\" " + body + (body.empty() ? "" : " ") + "\"\\\"\" space");
  }

  const JsonValue& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> ref_rules_;  // $ref -> its rule
  std::set<std::string> used_ref_names_;
  int depth_ = 0;
};

std::string compile_json_schema(const JsonValue& schema, const RootWrap& wrap) {
  std::string grammar = SchemaCompiler(schema).run(wrap);
  try {
    Grammar::parse(grammar);
  } catch (const Error& e) {
    // A $ref cycle that reads nothing ({"anyOf": [{"$ref": "#"}, ...]}) is
    // left recursion in the grammar.
    throw Error(ErrorKind::kInvalidArgument, std::string("JSON schema: its grammar is refused: ") + e.what());
  }
  return grammar;
}

std::string json_schema_to_grammar(std::string_view schema) {
  JsonValue parsed;
  try {
    parsed = parse_json(schema);
  } catch (const Error& e) {
    throw Error(e.kind(), std::string("JSON schema: ") + e.what());
  }
  return compile_json_schema(parsed);
}

std::string json_object_grammar() { return json_schema_to_grammar(R"({"type": "object"})"); }

std::string tool_call_grammar(std::string_view call_schema, std::string_view open, std::string_view close,
                              bool parallel) {
  JsonValue parsed;
  try {
    parsed = parse_json(call_schema);
  } catch (const Error& e) {
    throw Error(e.kind(), std::string("JSON schema: ") + e.what());
  }
  if (open.empty() && close.empty()) return compile_json_schema(parsed);
  return compile_json_schema(parsed, [&](const std::string& call) {
    const std::string one = gbnf_literal(std::string(open) + "\n") + " " + call + " " + gbnf_literal("\n" + std::string(close));
    return parallel ? one + " (" + gbnf_literal("\n") + " " + one + ")*" : one;
  });
}

void check_grammar(std::string_view grammar) { Grammar::parse(grammar); }

}  // namespace sipllm
