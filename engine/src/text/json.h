// A small JSON reader (RFC 8259) for JSON Schemas: objects keep their
// members in document order (the order properties are generated in), and
// numbers keep their text (a `const` is generated exactly as written).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sipllm {

struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  std::string text;  // a string's value, or a number as written
  std::vector<JsonValue> items;
  std::vector<std::pair<std::string, JsonValue>> members;

  // Out of line: std::pair<std::string, JsonValue> is complete only after
  // this class, and some standard libraries need it complete in the members'
  // destructor.
  JsonValue();
  JsonValue(const JsonValue&);
  JsonValue(JsonValue&&) noexcept;
  JsonValue& operator=(const JsonValue&);
  JsonValue& operator=(JsonValue&&) noexcept;
  ~JsonValue();

  bool is_null() const { return type == Type::kNull; }
  bool is_bool() const { return type == Type::kBool; }
  bool is_number() const { return type == Type::kNumber; }
  bool is_string() const { return type == Type::kString; }
  bool is_array() const { return type == Type::kArray; }
  bool is_object() const { return type == Type::kObject; }
  // A number with no fraction (1, -3, 2.0, 1e3).
  bool is_integer() const;

  // The member named `key` (the last one, if repeated), or null.
  const JsonValue* find(std::string_view key) const;
};

// Throws Error(kInvalidArgument) "JSON line L, column C: ..." for text that
// is not one JSON value, or nests arrays and objects deeper than max_depth
// (the reader recurses, and a WebAssembly stack is small).
constexpr int kMaxJsonDepth = 64;
JsonValue parse_json(std::string_view text, int max_depth = kMaxJsonDepth);

// Compact JSON, strings escaped minimally (UTF-8 kept), numbers as written.
std::string to_json(const JsonValue& value);
std::string json_quote(std::string_view text);

const char* json_type_name(JsonValue::Type type);

}  // namespace sipllm
