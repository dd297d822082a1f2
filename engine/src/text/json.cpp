#include "text/json.h"

#include <cmath>
#include <cstdlib>

#include "sipllm/error.h"

namespace sipllm {

JsonValue::JsonValue() = default;
JsonValue::JsonValue(const JsonValue&) = default;
JsonValue::JsonValue(JsonValue&&) noexcept = default;
JsonValue& JsonValue::operator=(const JsonValue&) = default;
JsonValue& JsonValue::operator=(JsonValue&&) noexcept = default;
JsonValue::~JsonValue() = default;

bool JsonValue::is_integer() const {
  return type == Type::kNumber && std::isfinite(number) && std::floor(number) == number;
}

const JsonValue* JsonValue::find(std::string_view key) const {
  for (auto it = members.rbegin(); it != members.rend(); ++it) {
    if (it->first == key) return &it->second;
  }
  return nullptr;
}

const char* json_type_name(JsonValue::Type type) {
  switch (type) {
    case JsonValue::Type::kNull: return "null";
    case JsonValue::Type::kBool: return "boolean";
    case JsonValue::Type::kNumber: return "number";
    case JsonValue::Type::kString: return "string";
    case JsonValue::Type::kArray: return "array";
    case JsonValue::Type::kObject: return "object";
  }
  return "?";
}

namespace {

class JsonReader {
 public:
  JsonReader(std::string_view text, int max_depth) : text_(text), max_depth_(max_depth) {}

  JsonValue read_document() {
    skip_space();
    JsonValue value = read_value(0);
    skip_space();
    if (pos_ < text_.size()) fail("unexpected " + found() + " after the JSON value");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else if ((static_cast<unsigned char>(text_[i]) & 0xC0) != 0x80) {
        ++column;
      }
    }
    throw Error(ErrorKind::kInvalidArgument,
                "JSON line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + message);
  }

  std::string found() const {
    if (pos_ >= text_.size()) return "end of text";
    const auto c = static_cast<unsigned char>(text_[pos_]);
    if (c < 0x20) return "control character";
    return std::string("'") + text_[pos_] + "'";
  }

  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool take(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  JsonValue read_value(int depth) {
    if (depth >= max_depth_) fail("nested deeper than " + std::to_string(max_depth_));
    JsonValue v;
    if (pos_ >= text_.size()) fail("expected a value, found end of text");
    const char c = text_[pos_];
    if (c == '{') {
      v.type = JsonValue::Type::kObject;
      ++pos_;
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return v;
      }
      while (true) {
        skip_space();
        if (pos_ >= text_.size() || text_[pos_] != '"') fail("expected a member name in quotes, found " + found());
        std::string key = read_string();
        skip_space();
        if (pos_ >= text_.size() || text_[pos_] != ':') fail("expected ':' after a member name, found " + found());
        ++pos_;
        skip_space();
        v.members.emplace_back(std::move(key), read_value(depth + 1));
        skip_space();
        if (pos_ < text_.size() && text_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < text_.size() && text_[pos_] == '}') {
          ++pos_;
          return v;
        }
        fail("expected ',' or '}' in an object, found " + found());
      }
    }
    if (c == '[') {
      v.type = JsonValue::Type::kArray;
      ++pos_;
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return v;
      }
      while (true) {
        skip_space();
        v.items.push_back(read_value(depth + 1));
        skip_space();
        if (pos_ < text_.size() && text_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < text_.size() && text_[pos_] == ']') {
          ++pos_;
          return v;
        }
        fail("expected ',' or ']' in an array, found " + found());
      }
    }
    if (c == '"') {
      v.type = JsonValue::Type::kString;
      v.text = read_string();
      return v;
    }
    if (take("true")) {
      v.type = JsonValue::Type::kBool;
      v.boolean = true;
      return v;
    }
    if (take("false")) {
      v.type = JsonValue::Type::kBool;
      return v;
    }
    if (take("null")) return v;
    if (c == '-' || (c >= '0' && c <= '9')) return read_number();
    fail("expected a value, found " + found());
  }

  JsonValue read_number() {
    const size_t start = pos_;
    auto digits = [&] {
      const size_t from = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      return pos_ - from;
    };
    if (text_[pos_] == '-') ++pos_;
    if (pos_ < text_.size() && text_[pos_] == '0') {
      ++pos_;
    } else if (digits() == 0) {
      fail("expected a digit, found " + found());
    }
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      if (digits() == 0) fail("expected a digit after '.', found " + found());
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (digits() == 0) fail("expected a digit in the exponent, found " + found());
    }
    JsonValue v;
    v.type = JsonValue::Type::kNumber;
    v.text = std::string(text_.substr(start, pos_ - start));
    v.number = std::strtod(v.text.c_str(), nullptr);
    return v;
  }

  uint32_t read_hex4() {
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      if (pos_ >= text_.size()) fail("expected 4 hex digits after \\u");
      const char c = text_[pos_++];
      value <<= 4;
      if (c >= '0' && c <= '9') {
        value |= static_cast<uint32_t>(c - '0');
      } else if (c >= 'a' && c <= 'f') {
        value |= static_cast<uint32_t>(c - 'a' + 10);
      } else if (c >= 'A' && c <= 'F') {
        value |= static_cast<uint32_t>(c - 'A' + 10);
      } else {
        --pos_;
        fail("expected 4 hex digits after \\u, found " + found());
      }
    }
    return value;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string read_string() {
    ++pos_;  // the opening quote
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail("unterminated string");
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail("control character in a string (it must be escaped)");
      if (c == '\\') {
        ++pos_;
        if (pos_ >= text_.size()) fail("unterminated string");
        const char e = text_[pos_++];
        switch (e) {
          case '"': out += '"'; break;
          case '\\': out += '\\'; break;
          case '/': out += '/'; break;
          case 'b': out += '\b'; break;
          case 'f': out += '\f'; break;
          case 'n': out += '\n'; break;
          case 'r': out += '\r'; break;
          case 't': out += '\t'; break;
          case 'u': {
            uint32_t cp = read_hex4();
            if (cp >= 0xD800 && cp <= 0xDBFF && text_.substr(pos_, 2) == "\\u") {
              const size_t save = pos_;
              pos_ += 2;
              const uint32_t low = read_hex4();
              if (low >= 0xDC00 && low <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
              } else {
                pos_ = save;
              }
            }
            // A lone surrogate has no UTF-8 form: U+FFFD, as decoders do.
            if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
            append_utf8(out, cp);
            break;
          }
          default:
            --pos_;
            fail("unknown escape \\" + std::string(1, e) + " in a string");
        }
        continue;
      }
      // UTF-8, checked: a schema's strings end up in a grammar.
      int len = c < 0x80 ? 1 : (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
      if (len == 0) fail("invalid UTF-8");
      uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
      for (int i = 1; i < len; ++i) {
        const size_t at = pos_ + static_cast<size_t>(i);
        if (at >= text_.size() || (static_cast<unsigned char>(text_[at]) & 0xC0) != 0x80) fail("invalid UTF-8");
        cp = (cp << 6) | (static_cast<unsigned char>(text_[at]) & 0x3F);
      }
      static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
      if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("invalid UTF-8");
      out.append(text_.substr(pos_, static_cast<size_t>(len)));
      pos_ += static_cast<size_t>(len);
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
  int max_depth_;
};

}  // namespace

JsonValue parse_json(std::string_view text, int max_depth) { return JsonReader(text, max_depth).read_document(); }

std::string json_quote(std::string_view text) {
  std::string out = "\"";
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          static const char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  return out + "\"";
}

std::string to_json(const JsonValue& value) {
  switch (value.type) {
    case JsonValue::Type::kNull: return "null";
    case JsonValue::Type::kBool: return value.boolean ? "true" : "false";
    case JsonValue::Type::kNumber: return value.text;
    case JsonValue::Type::kString: return json_quote(value.text);
    case JsonValue::Type::kArray: {
      std::string out = "[";
      for (size_t i = 0; i < value.items.size(); ++i) {
        if (i) out += ',';
        out += to_json(value.items[i]);
      }
      return out + "]";
    }
    case JsonValue::Type::kObject: {
      std::string out = "{";
      for (size_t i = 0; i < value.members.size(); ++i) {
        if (i) out += ',';
        out += json_quote(value.members[i].first);
        out += ':';
        out += to_json(value.members[i].second);
      }
      return out + "}";
    }
  }
  return "null";
}

}  // namespace sipllm
