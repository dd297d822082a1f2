// A JSON Schema validator for tests, written from the specification and not
// from the grammar compiler: it checks what the compiler's grammars let
// through. It covers the keywords the compiler supports, with the
// specification's meaning (additional properties allowed unless false,
// oneOf meaning exactly one, formats checked as the compiler generates them).
#pragma once

#include <cctype>
#include <cmath>
#include <cstdint>
#include <string>

#include "text/json.h"

namespace sipllm::test {

inline bool json_equal(const JsonValue& a, const JsonValue& b) {
  if (a.is_number() && b.is_number()) return a.number == b.number;
  if (a.type != b.type) return false;
  switch (a.type) {
    case JsonValue::Type::kNull: return true;
    case JsonValue::Type::kBool: return a.boolean == b.boolean;
    case JsonValue::Type::kString: return a.text == b.text;
    case JsonValue::Type::kArray:
      if (a.items.size() != b.items.size()) return false;
      for (size_t i = 0; i < a.items.size(); ++i) {
        if (!json_equal(a.items[i], b.items[i])) return false;
      }
      return true;
    case JsonValue::Type::kObject:
      if (a.members.size() != b.members.size()) return false;
      for (const auto& [k, v] : a.members) {
        const JsonValue* w = b.find(k);
        if (w == nullptr || !json_equal(v, *w)) return false;
      }
      return true;
    default: return false;
  }
}

inline size_t code_point_count(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

inline bool digits_at(const std::string& s, size_t at, size_t n) {
  if (at + n > s.size()) return false;
  for (size_t i = at; i < at + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return true;
}

inline int number_at(const std::string& s, size_t at, size_t n) { return std::stoi(s.substr(at, n)); }

inline bool valid_date(const std::string& s) {
  if (s.size() != 10 || !digits_at(s, 0, 4) || s[4] != '-' || !digits_at(s, 5, 2) || s[7] != '-' ||
      !digits_at(s, 8, 2)) {
    return false;
  }
  const int month = number_at(s, 5, 2), day = number_at(s, 8, 2);
  return month >= 1 && month <= 12 && day >= 1 && day <= 31;
}

inline bool valid_time(const std::string& s) {
  if (s.size() < 9 || !digits_at(s, 0, 2) || s[2] != ':' || !digits_at(s, 3, 2) || s[5] != ':' ||
      !digits_at(s, 6, 2)) {
    return false;
  }
  if (number_at(s, 0, 2) > 23 || number_at(s, 3, 2) > 59 || number_at(s, 6, 2) > 59) return false;
  size_t i = 8;
  if (s[i] == '.') {
    if (!digits_at(s, i + 1, 3)) return false;
    i += 4;
  }
  if (i < s.size() && s[i] == 'Z') return i + 1 == s.size();
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) {
    return s.size() == i + 6 && digits_at(s, i + 1, 2) && s[i + 3] == ':' && digits_at(s, i + 4, 2) &&
           number_at(s, i + 1, 2) <= 23 && number_at(s, i + 4, 2) <= 59;
  }
  return false;
}

inline bool valid_uuid(const std::string& s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (s[i] != '-') return false;
    } else if (!std::isxdigit(static_cast<unsigned char>(s[i]))) {
      return false;
    }
  }
  return true;
}

class SchemaCheck {
 public:
  explicit SchemaCheck(const JsonValue& root) : root_(root) {}

  // "" when `doc` is valid under the root schema, else why not.
  std::string check(const JsonValue& doc) const { return check(doc, root_, "$"); }

 private:
  const JsonValue* pointer(const std::string& ref) const {
    const JsonValue* node = &root_;
    size_t start = 2;
    if (ref == "#") return node;
    while (node != nullptr && start <= ref.size()) {
      const size_t slash = ref.find('/', start);
      const std::string key = ref.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
      node = node->is_object() ? node->find(key) : nullptr;
      if (slash == std::string::npos) break;
      start = slash + 1;
    }
    return node;
  }

  static bool has_type(const JsonValue& v, const std::string& t) {
    if (t == "integer") return v.is_integer();
    if (t == "number") return v.is_number();
    return std::string(json_type_name(v.type)) == t;
  }

  std::string check(const JsonValue& doc, const JsonValue& schema, const std::string& at) const {
    if (schema.is_bool()) return schema.boolean ? "" : at + ": schema false";
    if (const JsonValue* ref = schema.find("$ref")) {
      const JsonValue* target = pointer(ref->text);
      if (target == nullptr) return at + ": bad $ref";
      return check(doc, *target, at);
    }
    if (const JsonValue* any = schema.find("anyOf")) {
      for (const JsonValue& s : any->items) {
        if (check(doc, s, at).empty()) return "";
      }
      return at + ": no anyOf alternative";
    }
    if (const JsonValue* one = schema.find("oneOf")) {
      int n = 0;
      for (const JsonValue& s : one->items) n += check(doc, s, at).empty();
      return n == 1 ? "" : at + ": " + std::to_string(n) + " oneOf alternatives";
    }
    if (const JsonValue* all = schema.find("allOf")) {
      for (const JsonValue& s : all->items) {
        std::string e = check(doc, s, at);
        if (!e.empty()) return e;
      }
    }
    if (const JsonValue* type = schema.find("type")) {
      bool ok = false;
      if (type->is_string()) ok = has_type(doc, type->text);
      for (const JsonValue& t : type->items) ok = ok || has_type(doc, t.text);
      if (!ok) return at + ": wrong type " + json_type_name(doc.type);
    }
    if (const JsonValue* c = schema.find("const")) {
      if (!json_equal(doc, *c)) return at + ": not the const";
    }
    if (const JsonValue* e = schema.find("enum")) {
      bool ok = false;
      for (const JsonValue& v : e->items) ok = ok || json_equal(doc, v);
      if (!ok) return at + ": not in enum";
    }
    if (doc.is_object()) {
      const JsonValue* props = schema.find("properties");
      if (const JsonValue* req = schema.find("required")) {
        for (const JsonValue& r : req->items) {
          if (doc.find(r.text) == nullptr) return at + ": missing " + r.text;
        }
      }
      for (size_t i = 0; i < doc.members.size(); ++i) {
        const auto& [k, v] = doc.members[i];
        for (size_t j = 0; j < i; ++j) {
          if (doc.members[j].first == k) return at + ": key " + k + " twice";
        }
        const JsonValue* ps = props != nullptr ? props->find(k) : nullptr;
        if (ps != nullptr) {
          std::string e = check(v, *ps, at + "." + k);
          if (!e.empty()) return e;
        } else if (const JsonValue* ap = schema.find("additionalProperties")) {
          std::string e = check(v, *ap, at + "." + k);
          if (!e.empty()) return at + ": additional property " + k + ": " + e;
        }
      }
    }
    if (doc.is_array()) {
      size_t first = 0;
      const JsonValue* prefix = schema.find("prefixItems");
      const JsonValue* items = schema.find("items");
      if (prefix == nullptr && items != nullptr && items->is_array()) prefix = items, items = nullptr;
      if (prefix != nullptr) {
        for (; first < prefix->items.size() && first < doc.items.size(); ++first) {
          std::string e = check(doc.items[first], prefix->items[first], at + "[" + std::to_string(first) + "]");
          if (!e.empty()) return e;
        }
      }
      if (items != nullptr) {
        for (size_t i = first; i < doc.items.size(); ++i) {
          std::string e = check(doc.items[i], *items, at + "[" + std::to_string(i) + "]");
          if (!e.empty()) return e;
        }
      }
      if (const JsonValue* m = schema.find("minItems"); m && doc.items.size() < m->number) return at + ": too few items";
      if (const JsonValue* m = schema.find("maxItems"); m && doc.items.size() > m->number) return at + ": too many items";
    }
    if (doc.is_string()) {
      const size_t n = code_point_count(doc.text);
      if (const JsonValue* m = schema.find("minLength"); m && n < m->number) return at + ": too short";
      if (const JsonValue* m = schema.find("maxLength"); m && n > m->number) return at + ": too long";
      if (const JsonValue* f = schema.find("format")) {
        const std::string& s = doc.text;
        const size_t t = s.find('T');
        if (f->text == "date" && !valid_date(s)) return at + ": not a date";
        if (f->text == "time" && !valid_time(s)) return at + ": not a time";
        if (f->text == "date-time" &&
            (t == std::string::npos || !valid_date(s.substr(0, t)) || !valid_time(s.substr(t + 1)))) {
          return at + ": not a date-time";
        }
        if (f->text == "uuid" && !valid_uuid(s)) return at + ": not a uuid";
      }
    }
    if (doc.is_number()) {
      const double x = doc.number;
      // Draft 4 writes exclusiveMinimum/exclusiveMaximum as true beside the bound.
      const JsonValue* xmin = schema.find("exclusiveMinimum");
      const JsonValue* xmax = schema.find("exclusiveMaximum");
      const bool strict_min = xmin != nullptr && xmin->is_bool() && xmin->boolean;
      const bool strict_max = xmax != nullptr && xmax->is_bool() && xmax->boolean;
      if (const JsonValue* m = schema.find("minimum"); m && (x < m->number || (strict_min && x == m->number))) {
        return at + ": below minimum";
      }
      if (const JsonValue* m = schema.find("maximum"); m && (x > m->number || (strict_max && x == m->number))) {
        return at + ": above maximum";
      }
      if (const JsonValue* m = schema.find("exclusiveMinimum"); m && m->is_number() && x <= m->number) {
        return at + ": not above exclusiveMinimum";
      }
      if (const JsonValue* m = schema.find("exclusiveMaximum"); m && m->is_number() && x >= m->number) {
        return at + ": not below exclusiveMaximum";
      }
    }
    return "";
  }

  const JsonValue& root_;
};

}  // namespace sipllm::test
