#include "text/grammar.h"

#include <algorithm>
#include <map>

#include "sipllm/error.h"

namespace sipllm {

// ---------------------------------------------------------------------------
// Character sets

bool Grammar::CharSet::contains(uint32_t cp) const {
  if (cp < 128) return (ascii[cp >> 6] >> (cp & 63)) & 1;
  const auto it = std::upper_bound(lo.begin(), lo.end(), cp);
  if (it == lo.begin()) return false;
  return cp <= hi[static_cast<size_t>(it - lo.begin()) - 1];
}

bool Grammar::CharSet::intersects(uint32_t first, uint32_t last) const {
  // The first range that ends at or after `first` must start by `last`.
  const auto it = std::lower_bound(hi.begin(), hi.end(), first);
  if (it == hi.end()) return false;
  return lo[static_cast<size_t>(it - hi.begin())] <= last;
}

bool Grammar::CharSet::covers(uint32_t first, uint32_t last) const {
  // Ranges are merged when adjacent, so a covered span lies in one range.
  const auto it = std::upper_bound(lo.begin(), lo.end(), first);
  if (it == lo.begin()) return false;
  return last <= hi[static_cast<size_t>(it - lo.begin()) - 1];
}

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr size_t kNoPos = static_cast<size_t>(-1);
// Groups nest by recursion; a WebAssembly main thread has a 64 kB stack.
constexpr int kMaxNesting = 64;

Grammar::CharSet make_charset(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negate) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  if (negate) {
    std::vector<std::pair<uint32_t, uint32_t>> complement;
    uint32_t next = 0;
    for (const auto& r : merged) {
      if (r.first > next) complement.push_back({next, r.first - 1});
      next = r.second + 1;
    }
    if (next <= kMaxCodePoint) complement.push_back({next, kMaxCodePoint});
    merged = std::move(complement);
  }
  Grammar::CharSet set;
  for (const auto& r : merged) {
    set.lo.push_back(r.first);
    set.hi.push_back(r.second);
    for (uint32_t c = r.first; c <= std::min<uint32_t>(r.second, 127); ++c) set.ascii[c >> 6] |= uint64_t{1} << (c & 63);
  }
  return set;
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

// ---------------------------------------------------------------------------
// Parser

class GrammarParser {
 public:
  explicit GrammarParser(std::string_view src) : src_(src) {}

  std::shared_ptr<Grammar> run() {
    skip_space(true);
    while (pos_ < src_.size()) parse_rule();
    return build();
  }

 private:
  struct PItem {
    Grammar::ItemKind kind;
    uint32_t value = 0, min = 0, max = 0;
    size_t pos = kNoPos;  // where it was written, for errors
  };
  using Sequence = std::vector<PItem>;
  struct PRule {
    std::string name;
    std::string owner;  // the named rule a group belongs to
    std::vector<Sequence> alternatives;
    bool defined = false;
    size_t defined_at = kNoPos, first_use = kNoPos;
  };

  [[noreturn]] void fail(size_t at, const std::string& message) const {
    if (at == kNoPos) throw Error(ErrorKind::kInvalidArgument, "grammar: " + message);
    at = std::min(at, src_.size());
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at; ++i) {
      if (src_[i] == '\n') {
        ++line;
        column = 1;
      } else if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) {
        ++column;  // columns count characters, not UTF-8 bytes
      }
    }
    throw Error(ErrorKind::kInvalidArgument,
                "grammar line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + message);
  }

  std::string found() const {
    if (pos_ >= src_.size()) return "the end of the grammar";
    const char c = src_[pos_];
    if (c == '\n' || c == '\r') return "the end of the line";
    if (static_cast<unsigned char>(c) < 0x20) return "a control character";
    if (static_cast<unsigned char>(c) >= 0x80 && !(static_cast<unsigned char>(c) >= 0xC2 && static_cast<unsigned char>(c) <= 0xF4)) {
      return "a byte that is not UTF-8";
    }
    size_t n = 1;
    while (pos_ + n < src_.size() && (static_cast<unsigned char>(src_[pos_ + n]) & 0xC0) == 0x80) ++n;
    std::string quoted = "'";
    quoted.append(src_.substr(pos_, n));
    return quoted += '\'';
  }

  bool at_end() const { return pos_ >= src_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0'; }

  // Blanks and comments; newlines too where a rule may continue.
  void skip_space(bool newline_ok) {
    while (!at_end()) {
      const char c = src_[pos_];
      if (c == ' ' || c == '\t') {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && src_[pos_] != '\n' && src_[pos_] != '\r') ++pos_;
      } else if (newline_ok && (c == '\n' || c == '\r')) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name(const char* what) {
    const size_t start = pos_;
    while (!at_end() && is_name_char(src_[pos_])) ++pos_;
    if (pos_ == start) fail(pos_, std::string("expected ") + what + ", found " + found());
    return std::string(src_.substr(start, pos_ - start));
  }

  uint32_t rule_id(const std::string& name, size_t used_at) {
    auto it = rule_ids_.find(name);
    if (it != rule_ids_.end()) {
      PRule& r = rules_[it->second];
      if (r.first_use == kNoPos) r.first_use = used_at;
      return it->second;
    }
    const auto id = static_cast<uint32_t>(rules_.size());
    PRule r;
    r.name = r.owner = name;
    r.first_use = used_at;
    rules_.push_back(std::move(r));
    rule_ids_.emplace(name, id);
    return id;
  }

  uint32_t new_group(size_t at) {
    const auto id = static_cast<uint32_t>(rules_.size());
    PRule r;
    r.name = current_rule_ + "_" + std::to_string(id);
    r.owner = current_rule_;
    r.defined = true;
    r.defined_at = at;
    rules_.push_back(std::move(r));
    return id;
  }

  void parse_rule() {
    const size_t start = pos_;
    const std::string name = parse_name("a rule name");
    skip_space(false);
    if (src_.substr(pos_, 3) != "::=") fail(pos_, "expected '::=' after the rule name '" + name + "', found " + found());
    pos_ += 3;
    skip_space(true);
    const uint32_t id = rule_id(name, kNoPos);
    if (rules_[id].defined) {
      const size_t first = rules_[id].defined_at;
      size_t line = 1;
      for (size_t i = 0; i < first; ++i) line += src_[i] == '\n';
      fail(start, "rule '" + name + "' is defined twice (first on line " + std::to_string(line) + ")");
    }
    rules_[id].defined = true;
    rules_[id].defined_at = start;
    current_rule_ = name;
    std::vector<Sequence> alternatives = parse_alternatives(false, 0);
    rules_[id].alternatives = std::move(alternatives);
    if (!at_end()) {
      if (src_[pos_] == '\r') {
        ++pos_;
        if (peek() == '\n') ++pos_;
      } else if (src_[pos_] == '\n') {
        ++pos_;
      } else {
        fail(pos_, "expected an item, '|' or the end of the line in rule '" + name + "', found " + found());
      }
    }
    skip_space(true);
  }

  std::vector<Sequence> parse_alternatives(bool nested, int depth) {
    std::vector<Sequence> alternatives;
    alternatives.push_back(parse_sequence(nested, depth));
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      alternatives.push_back(parse_sequence(nested, depth));
    }
    return alternatives;
  }

  // One character of a literal or class: an escape or a UTF-8 sequence.
  uint32_t parse_char() {
    const size_t start = pos_;
    const auto byte = static_cast<unsigned char>(src_[pos_]);
    if (byte == '\\') {
      if (pos_ + 1 >= src_.size()) fail(start, "unfinished escape at the end of the grammar");
      const char e = src_[pos_ + 1];
      pos_ += 2;
      int digits = 0;
      switch (e) {
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 't': return '\t';
        case 'r': return '\r';
        case 'n': return '\n';
        case '\\': case '"': case '[': case ']': case '-': return static_cast<unsigned char>(e);
        default:
          pos_ = start + 1;
          fail(start, "unknown escape \\" + found().substr(1, found().size() - 2) +
                          " (known: \\x.. \\u.... \\U........ \\t \\r \\n \\\\ \\\" \\[ \\] \\-)");
      }
      uint64_t value = 0;
      for (int i = 0; i < digits; ++i) {
        const int h = hex_value(peek());
        if (h < 0) fail(pos_, "expected " + std::to_string(digits) + " hex digits after \\" + e + ", found " + found());
        value = value * 16 + static_cast<uint64_t>(h);
        ++pos_;
      }
      if (value > kMaxCodePoint) fail(start, "code point above U+10FFFF");
      return static_cast<uint32_t>(value);
    }
    // UTF-8: the grammar is text, and its characters are code points.
    int len = 0;
    uint32_t cp = 0;
    if (byte < 0x80) {
      len = 1;
      cp = byte;
    } else if (byte >= 0xC2 && byte <= 0xDF) {
      len = 2;
      cp = byte & 0x1F;
    } else if (byte >= 0xE0 && byte <= 0xEF) {
      len = 3;
      cp = byte & 0x0F;
    } else if (byte >= 0xF0 && byte <= 0xF4) {
      len = 4;
      cp = byte & 0x07;
    } else {
      fail(start, "invalid UTF-8 in the grammar");
    }
    for (int i = 1; i < len; ++i) {
      const size_t at = pos_ + static_cast<size_t>(i);
      if (at >= src_.size() || (static_cast<unsigned char>(src_[at]) & 0xC0) != 0x80) {
        fail(start, "invalid UTF-8 in the grammar");
      }
      cp = (cp << 6) | (static_cast<unsigned char>(src_[at]) & 0x3F);
    }
    static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
      fail(start, "invalid UTF-8 in the grammar");
    }
    pos_ += static_cast<size_t>(len);
    return cp;
  }

  uint32_t charset_id(Grammar::CharSet set) {
    auto key = std::make_pair(set.lo, set.hi);
    auto it = charset_ids_.find(key);
    if (it != charset_ids_.end()) return it->second;
    const auto id = static_cast<uint32_t>(charsets_.size());
    charsets_.push_back(std::move(set));
    charset_ids_.emplace(std::move(key), id);
    return id;
  }

  PItem chars_item(uint32_t set, size_t at) {
    PItem item{Grammar::ItemKind::kChars};
    item.value = set;
    item.pos = at;
    return item;
  }

  uint32_t parse_count(const char* what) {
    if (!(peek() >= '0' && peek() <= '9')) fail(pos_, std::string("expected ") + what + ", found " + found());
    const size_t start = pos_;
    uint64_t value = 0;
    while (peek() >= '0' && peek() <= '9') {
      value = value * 10 + static_cast<uint64_t>(peek() - '0');
      if (value > Grammar::kMaxRepetition) {
        fail(start, "repetition count above the limit of " + std::to_string(Grammar::kMaxRepetition));
      }
      ++pos_;
    }
    return static_cast<uint32_t>(value);
  }

  // Turns the last item of `seq` (from `last`) into its repetition.
  void repeat(Sequence& seq, size_t last, uint32_t min, uint32_t max, size_t at, char op) {
    if (last == kNoPos || last >= seq.size()) {
      fail(at, std::string("'") + op + "' must follow an item to repeat");
    }
    if (max < min) fail(at, "repetition {" + std::to_string(min) + "," + std::to_string(max) + "}: the maximum is below the minimum");
    uint32_t body;
    if (seq.size() - last == 1 && seq[last].kind == Grammar::ItemKind::kRule) {
      body = seq[last].value;
    } else {
      body = new_group(seq[last].pos);
      rules_[body].alternatives.push_back(Sequence(seq.begin() + static_cast<std::ptrdiff_t>(last), seq.end()));
    }
    seq.resize(last);
    PItem item{Grammar::ItemKind::kRepeat};
    item.value = body;
    item.min = min;
    item.max = max;
    item.pos = at;
    seq.push_back(item);
  }

  Sequence parse_sequence(bool nested, int depth) {
    Sequence seq;
    size_t last = kNoPos;  // where the item a postfix operator applies to starts
    while (!at_end()) {
      const size_t start = pos_;
      const char c = src_[pos_];
      if (c == '"') {
        ++pos_;
        last = seq.size();
        while (true) {
          if (at_end()) fail(start, "unterminated string literal");
          if (src_[pos_] == '"') break;
          const size_t at = pos_;
          const uint32_t cp = parse_char();
          seq.push_back(chars_item(charset_id(make_charset({{cp, cp}}, false)), at));
        }
        ++pos_;
        if (seq.size() == last) last = kNoPos;  // "" is nothing to repeat
        skip_space(nested);
      } else if (c == '[') {
        ++pos_;
        bool negate = false;
        if (peek() == '^') {
          negate = true;
          ++pos_;
        }
        std::vector<std::pair<uint32_t, uint32_t>> ranges;
        while (true) {
          if (at_end()) fail(start, "unterminated character class");
          if (src_[pos_] == ']') break;
          const size_t at = pos_;
          const uint32_t first = parse_char();
          uint32_t lastc = first;
          if (peek() == '-' && pos_ + 1 < src_.size() && src_[pos_ + 1] != ']') {
            ++pos_;
            lastc = parse_char();
            if (lastc < first) fail(at, "character range with its end before its start");
          }
          ranges.push_back({first, lastc});
        }
        ++pos_;
        last = seq.size();
        seq.push_back(chars_item(charset_id(make_charset(std::move(ranges), negate)), start));
        skip_space(nested);
      } else if (c == '<' || c == '!') {
        fail(start, "token references (<[id]>, <token>, !<...>) are not supported: the grammar describes text");
      } else if (is_name_char(c)) {
        const std::string name = parse_name("a rule name");
        PItem item{Grammar::ItemKind::kRule};
        item.value = rule_id(name, start);
        item.pos = start;
        last = seq.size();
        seq.push_back(item);
        skip_space(nested);
      } else if (c == '(') {
        if (depth >= kMaxNesting) fail(start, "groups nested more than " + std::to_string(kMaxNesting) + " deep");
        ++pos_;
        skip_space(true);
        const uint32_t group = new_group(start);
        std::vector<Sequence> alternatives = parse_alternatives(true, depth + 1);
        rules_[group].alternatives = std::move(alternatives);
        if (peek() != ')') fail(pos_, "expected ')' to close the group opened at " + where(start) + ", found " + found());
        ++pos_;
        PItem item{Grammar::ItemKind::kRule};
        item.value = group;
        item.pos = start;
        last = seq.size();
        seq.push_back(item);
        skip_space(nested);
      } else if (c == '.') {
        ++pos_;
        last = seq.size();
        seq.push_back(chars_item(charset_id(make_charset({{0, kMaxCodePoint}}, false)), start));
        skip_space(nested);
      } else if (c == '*' || c == '+' || c == '?') {
        ++pos_;
        repeat(seq, last, c == '+' ? 1 : 0, c == '?' ? 1 : Grammar::kUnbounded, start, c);
        skip_space(nested);
      } else if (c == '{') {
        ++pos_;
        skip_space(nested);
        const uint32_t min = parse_count("a repetition count after '{'");
        skip_space(nested);
        uint32_t max = min;
        if (peek() == ',') {
          ++pos_;
          skip_space(nested);
          max = Grammar::kUnbounded;
          if (peek() >= '0' && peek() <= '9') {
            max = parse_count("a repetition count");
            skip_space(nested);
          }
        }
        if (peek() != '}') fail(pos_, "expected ',' or '}' in the repetition count, found " + found());
        ++pos_;
        repeat(seq, last, min, max, start, '{');
        skip_space(nested);
      } else {
        break;
      }
    }
    return seq;
  }

  std::string where(size_t at) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        column = 1;
      } else if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) {
        ++column;
      }
    }
    return "line " + std::to_string(line) + ", column " + std::to_string(column);
  }

  std::shared_ptr<Grammar> build() {
    for (const PRule& r : rules_) {
      if (!r.defined) fail(r.first_use, "undefined rule '" + r.name + "'");
    }
    const auto root = rule_ids_.find("root");
    if (root == rule_ids_.end()) fail(kNoPos, "no rule named 'root' (where the grammar starts)");

    auto grammar = std::make_shared<Grammar>();
    std::vector<size_t> item_pos;
    for (const PRule& r : rules_) {
      Grammar::Rule rule;
      rule.name = r.name;
      for (const Sequence& seq : r.alternatives) {
        rule.alternatives.push_back(static_cast<uint32_t>(grammar->items_.size()));
        for (const PItem& p : seq) {
          Grammar::Item item;
          item.kind = p.kind;
          item.value = p.value;
          item.min = p.min;
          item.max = p.max;
          grammar->items_.push_back(item);
          item_pos.push_back(p.pos);
        }
        grammar->items_.push_back(Grammar::Item{});
        item_pos.push_back(kNoPos);
      }
      grammar->rules_.push_back(std::move(rule));
    }
    grammar->start_item_ = static_cast<uint32_t>(grammar->items_.size());
    Grammar::Item start;
    start.kind = Grammar::ItemKind::kRule;
    start.value = root->second;
    grammar->items_.push_back(start);
    grammar->items_.push_back(Grammar::Item{});
    grammar->charsets_ = std::move(charsets_);

    std::vector<Grammar::Item>& items = grammar->items_;
    const size_t n_rules = grammar->rules_.size();

    // Which rules can match the empty string: a fixed point.
    std::vector<bool> nullable(n_rules, false);
    auto item_nullable = [&](const Grammar::Item& item) {
      switch (item.kind) {
        case Grammar::ItemKind::kChars: return false;
        case Grammar::ItemKind::kRule: return static_cast<bool>(nullable[item.value]);
        case Grammar::ItemKind::kRepeat: return item.min == 0 || nullable[item.value];
        case Grammar::ItemKind::kEnd: return true;
      }
      return false;
    };
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n_rules; ++r) {
        if (nullable[r]) continue;
        for (uint32_t alt : grammar->rules_[r].alternatives) {
          uint32_t i = alt;
          while (items[i].kind != Grammar::ItemKind::kEnd && item_nullable(items[i])) ++i;
          if (items[i].kind == Grammar::ItemKind::kEnd) {
            nullable[r] = true;
            changed = true;
            break;
          }
        }
      }
    }

    // A repetition of something that can match nothing: unbounded, it could
    // loop without reading (llama.cpp refuses it as left recursion); bounded,
    // the empty iterations may stand for any number of required ones.
    for (size_t i = 0; i < items.size(); ++i) {
      Grammar::Item& item = items[i];
      if (item.kind != Grammar::ItemKind::kRepeat || !nullable[item.value]) continue;
      if (item.max == Grammar::kUnbounded) {
        fail(item_pos[i], "the repeated item can match the empty string, so the repetition could loop without "
                          "reading anything; make the item itself non-empty");
      }
      item.nullable_body = true;
      item.min = 0;
    }

    // Left recursion: a rule that reaches itself through the leftmost items
    // of its alternatives (past items that can be empty) would expand
    // forever without reading a character.
    std::vector<std::vector<uint32_t>> leftmost(n_rules);  // rules each can start with
    for (size_t r = 0; r < n_rules; ++r) {
      for (uint32_t alt : grammar->rules_[r].alternatives) {
        for (uint32_t i = alt; items[i].kind != Grammar::ItemKind::kEnd; ++i) {
          if (items[i].kind == Grammar::ItemKind::kChars) break;
          leftmost[r].push_back(items[i].value);
          if (!item_nullable(items[i])) break;
        }
      }
    }
    // Depth-first, iteratively (a long chain of rules must not overflow the
    // call stack).
    std::vector<int> color(n_rules, 0);  // 0 new, 1 on the path, 2 done
    std::vector<std::pair<uint32_t, size_t>> path;  // rule, next edge
    for (uint32_t root_rule = 0; root_rule < n_rules; ++root_rule) {
      if (color[root_rule] != 0) continue;
      color[root_rule] = 1;
      path.push_back({root_rule, 0});
      while (!path.empty()) {
        auto& [r, edge] = path.back();
        if (edge == leftmost[r].size()) {
          color[r] = 2;
          path.pop_back();
          continue;
        }
        const uint32_t target = leftmost[r][edge++];
        if (color[target] == 0) {
          color[target] = 1;
          path.push_back({target, 0});
        } else if (color[target] == 1) {
          std::string cycle, previous;
          auto it = std::find_if(path.begin(), path.end(), [&](const auto& p) { return p.first == target; });
          for (; it != path.end(); ++it) {
            const std::string& owner = rules_[it->first].owner;
            if (owner == previous) continue;
            cycle += (cycle.empty() ? "" : " -> ") + owner;
            previous = owner;
          }
          cycle += " -> " + rules_[target].owner;
          fail(rules_[target].defined_at, "left recursion: rule '" + rules_[target].owner +
                                              "' can reach itself before reading a character (" + cycle +
                                              "); write it with repetition instead");
        }
      }
    }
    return grammar;
  }

  std::string_view src_;
  size_t pos_ = 0;
  std::string current_rule_;
  std::vector<PRule> rules_;
  std::unordered_map<std::string, uint32_t> rule_ids_;
  std::vector<Grammar::CharSet> charsets_;
  std::map<std::pair<std::vector<uint32_t>, std::vector<uint32_t>>, uint32_t> charset_ids_;
};

std::shared_ptr<const Grammar> Grammar::parse(std::string_view text) {
  return GrammarParser(text).run();
}

// ---------------------------------------------------------------------------
// Matcher

namespace {

// The `aux` of a character frame: 0 before a character; otherwise a UTF-8
// sequence under way.
constexpr uint32_t kInCharacter = 1u << 31;
constexpr uint32_t kAny = 1u << 30;  // every completion of it is in the set
constexpr int kRemainShift = 28;     // continuation bytes still to come (1..3)
constexpr int kLengthShift = 26;     // length of the sequence - 2 (0..2)
constexpr uint32_t kValueMask = (1u << 21) - 1;

enum class Utf8Step { kDead, kPartial, kDone };

// Where a sequence of `len` bytes with `remain` bytes to come, its bits so
// far `value`, may still land; decides it against `set`. Overlong forms,
// surrogates and code points above U+10FFFF are invalid UTF-8, and dead.
Utf8Step narrow(const Grammar::CharSet& set, uint32_t len, uint32_t remain, uint32_t value, uint32_t* aux) {
  static const uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  static const uint32_t kMax[5] = {0, 0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  const uint32_t lo = value << (6 * remain);
  const uint32_t hi = lo | ((1u << (6 * remain)) - 1);
  uint32_t first = std::max(lo, kMin[len]);
  uint32_t last = std::min(hi, kMax[len]);
  if (len == 3 && last >= 0xD800 && first <= 0xDFFF) {
    if (first >= 0xD800) return Utf8Step::kDead;  // only surrogates left
    last = std::min<uint32_t>(last, 0xD7FF);
  }
  if (first > last) return Utf8Step::kDead;
  if (remain == 0) return set.contains(first) ? Utf8Step::kDone : Utf8Step::kDead;
  if (!set.intersects(first, last)) return Utf8Step::kDead;
  if (first == lo && last == hi && set.covers(lo, hi)) {
    // Any continuation bytes finish it validly inside the set: one state
    // stands for all of them.
    *aux = kInCharacter | kAny | (remain << kRemainShift) | ((len - 2) << kLengthShift);
  } else {
    *aux = kInCharacter | (remain << kRemainShift) | ((len - 2) << kLengthShift) | value;
  }
  return Utf8Step::kPartial;
}

Utf8Step utf8_step(const Grammar::CharSet& set, uint32_t aux, uint8_t byte, uint32_t* next_aux) {
  if (aux == 0) {
    if (byte < 0x80) return set.contains(byte) ? Utf8Step::kDone : Utf8Step::kDead;
    if (byte >= 0xC2 && byte <= 0xDF) return narrow(set, 2, 1, byte & 0x1F, next_aux);
    if (byte >= 0xE0 && byte <= 0xEF) return narrow(set, 3, 2, byte & 0x0F, next_aux);
    if (byte >= 0xF0 && byte <= 0xF4) return narrow(set, 4, 3, byte & 0x07, next_aux);
    return Utf8Step::kDead;  // a continuation byte, C0/C1 (overlong) or F5..FF
  }
  if ((byte & 0xC0) != 0x80) return Utf8Step::kDead;
  const uint32_t remain = ((aux >> kRemainShift) & 3) - 1;
  const uint32_t len = ((aux >> kLengthShift) & 3) + 2;
  if (aux & kAny) {
    if (remain == 0) return Utf8Step::kDone;
    *next_aux = (aux & ~(3u << kRemainShift)) | (remain << kRemainShift);
    return Utf8Step::kPartial;
  }
  const uint32_t value = ((aux & kValueMask) << 6) | (byte & 0x3F);
  return narrow(set, len, remain, value, next_aux);
}

}  // namespace

size_t GrammarMatcher::NodeKeyHash::operator()(const Node& n) const {
  uint64_t h = (static_cast<uint64_t>(n.item) << 32 | n.aux) * 0x9E3779B97F4A7C15ull;
  h ^= (h >> 29) + static_cast<uint64_t>(n.parent) * 0xBF58476D1CE4E5B9ull;
  return static_cast<size_t>(h ^ (h >> 32));
}

size_t GrammarMatcher::StacksHash::operator()(const std::vector<uint32_t>& v) const {
  uint64_t h = 0xCBF29CE484222325ull;
  for (uint32_t x : v) h = (h ^ x) * 0x100000001B3ull;
  return static_cast<size_t>(h ^ (h >> 31));
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  reset_caches(nullptr);
}

uint32_t GrammarMatcher::intern(uint32_t item, uint32_t aux, uint32_t parent) {
  const Node key{item, aux, parent};
  const auto [it, inserted] = node_ids_.try_emplace(key, static_cast<uint32_t>(nodes_.size()));
  if (inserted) {
    nodes_.push_back(key);
    seen_.push_back(0);
  }
  return it->second;
}

// The stack that resumes at `item` over `parent`: an item that ends its
// alternative is not kept, so right recursion does not grow the stack.
uint32_t GrammarMatcher::continuation(uint32_t parent, uint32_t item) {
  return grammar_->items()[item].kind == Grammar::ItemKind::kEnd ? parent : intern(item, 0, parent);
}

// Expands a stack until every resulting stack has a character item on top
// (or is empty: the sentence may end), adding those to `out`.
void GrammarMatcher::expand(uint32_t node, std::vector<uint32_t>& out) {
  const std::vector<Grammar::Item>& items = grammar_->items();
  const std::vector<Grammar::Rule>& rules = grammar_->rules();
  todo_.clear();
  todo_.push_back(node);
  while (!todo_.empty()) {
    const uint32_t n = todo_.back();
    todo_.pop_back();
    ++work_;
    if (seen_[n] == stamp_) continue;
    seen_[n] = stamp_;
    if (n == 0) {
      out.push_back(0);
      continue;
    }
    const Node frame = nodes_[n];
    const Grammar::Item& item = items[frame.item];
    switch (item.kind) {
      case Grammar::ItemKind::kChars:
        out.push_back(n);
        break;
      case Grammar::ItemKind::kRule: {
        const uint32_t next = continuation(frame.parent, frame.item + 1);
        for (uint32_t alt : rules[item.value].alternatives) {
          todo_.push_back(items[alt].kind == Grammar::ItemKind::kEnd ? next : intern(alt, 0, next));
        }
        break;
      }
      case Grammar::ItemKind::kRepeat: {
        const uint32_t count = frame.aux;
        if (item.nullable_body) {
          // An iteration that read nothing comes back here with a higher
          // count, which can do no more than the lower one: drop it, so a
          // bounded repetition of an optional item is not walked to its bound.
          const uint64_t key = static_cast<uint64_t>(frame.parent) << 32 | frame.item;
          auto [it, inserted] = repeat_min_.emplace(key, count);
          if (!inserted) {
            if (it->second <= count) break;
            it->second = count;
          }
        }
        if (count < item.max) {
          // Past the minimum an unbounded repetition's count no longer
          // matters: keeping it there makes "x*" one state, not one per x.
          const uint32_t next_count = item.max == Grammar::kUnbounded ? std::min(count + 1, item.min) : count + 1;
          const uint32_t loop = intern(frame.item, next_count, frame.parent);
          for (uint32_t alt : rules[item.value].alternatives) {
            if (items[alt].kind != Grammar::ItemKind::kEnd) todo_.push_back(intern(alt, 0, loop));
          }
        }
        if (count >= item.min) todo_.push_back(continuation(frame.parent, frame.item + 1));
        break;
      }
      case Grammar::ItemKind::kEnd:
        break;  // never on a stack
    }
  }
}

GrammarMatcher::StateId GrammarMatcher::intern_state(std::vector<uint32_t>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.size() > kMaxStacks) {
    throw Error(ErrorKind::kInvalidArgument,
                "grammar: more than " + std::to_string(kMaxStacks) +
                    " parses alive at once; the grammar is too ambiguous (e.g. many optional items in a row: "
                    "write x{0,n} rather than x? x? x?)");
  }
  const auto it = state_ids_.find(stacks);
  if (it != state_ids_.end()) return it->second;
  const auto id = static_cast<StateId>(states_.size());
  State state;
  state.first = static_cast<uint32_t>(stack_pool_.size());
  state.count = static_cast<uint32_t>(stacks.size());
  state.can_end = !stacks.empty() && stacks[0] == 0;
  state.must_end = stacks.size() == 1 && stacks[0] == 0;
  stack_pool_.insert(stack_pool_.end(), stacks.begin(), stacks.end());
  states_.push_back(state);
  rows_.push_back(-1);
  state_ids_.emplace(stacks, id);
  return id;
}

GrammarMatcher::StateId GrammarMatcher::compute_step(StateId state, uint8_t byte) {
  const std::vector<Grammar::Item>& items = grammar_->items();
  const std::vector<Grammar::CharSet>& sets = grammar_->charsets();
  begin_expansion();
  const State s = states_[static_cast<size_t>(state)];
  work_ += s.count;
  for (uint32_t k = 0; k < s.count; ++k) {
    const uint32_t n = stack_pool_[s.first + k];
    if (n == 0) continue;  // a finished sentence reads nothing more
    const Node frame = nodes_[n];
    uint32_t aux = 0;
    switch (utf8_step(sets[items[frame.item].value], frame.aux, byte, &aux)) {
      case Utf8Step::kDead:
        break;
      case Utf8Step::kPartial:
        out_.push_back(intern(frame.item, aux, frame.parent));
        break;
      case Utf8Step::kDone:
        expand(continuation(frame.parent, frame.item + 1), out_);
        break;
    }
  }
  const StateId next = out_.empty() ? kDead : intern_state(out_);
  int32_t& row = rows_[static_cast<size_t>(state)];
  if (row < 0) {
    row = static_cast<int32_t>(transitions_.size() / 256);
    transitions_.resize(transitions_.size() + 256, kUnknown);
  }
  transitions_[static_cast<size_t>(row) * 256 + byte] = next;
  return next;
}

void GrammarMatcher::begin_expansion() {
  out_.clear();
  if (++stamp_ == 0) {  // wrapped: forget every old stamp
    std::fill(seen_.begin(), seen_.end(), 0);
    stamp_ = 1;
  }
  // clear() costs the table's size; a table grown once by an ambiguous
  // state would slow every later step.
  if (repeat_min_.bucket_count() > 64) {
    std::unordered_map<uint64_t, uint32_t>().swap(repeat_min_);
  } else {
    repeat_min_.clear();
  }
}

GrammarMatcher::StateId GrammarMatcher::initial_state() {
  begin_expansion();
  expand(intern(grammar_->start_item(), 0, 0), out_);
  return intern_state(out_);
}

void GrammarMatcher::reset_caches(const std::vector<std::vector<Node>>* keep) {
  nodes_.assign(1, Node{0, 0, 0});
  node_ids_.clear();
  states_.clear();
  stack_pool_.clear();
  state_ids_.clear();
  transitions_.clear();
  rows_.clear();
  seen_.assign(1, 0);
  stamp_ = 0;
  if (keep != nullptr) {
    std::vector<uint32_t> stacks;
    for (const std::vector<Node>& frames : *keep) {  // each bottom first
      uint32_t parent = 0;
      for (const Node& f : frames) parent = intern(f.item, f.aux, parent);
      stacks.push_back(parent);
    }
    current_ = intern_state(stacks);
  }
  start_ = initial_state();
  if (keep == nullptr) current_ = start_;
}

void GrammarMatcher::trim_if_large() {
  if (states_.size() <= kTrimStates && nodes_.size() <= kTrimStates * 64) return;
  std::vector<std::vector<Node>> keep;
  const State s = states_[static_cast<size_t>(current_)];
  for (uint32_t k = 0; k < s.count; ++k) {
    std::vector<Node> frames;
    for (uint32_t n = stack_pool_[s.first + k]; n != 0; n = nodes_[n].parent) frames.push_back(nodes_[n]);
    std::reverse(frames.begin(), frames.end());
    keep.push_back(std::move(frames));
  }
  reset_caches(&keep);
  ++epoch_;
}

GrammarMatcher::StateId GrammarMatcher::walk(StateId state, std::string_view bytes) {
  for (char c : bytes) {
    if (state == kDead) return kDead;
    state = step(state, static_cast<uint8_t>(c));
  }
  return state;
}

bool GrammarMatcher::accept(std::string_view bytes) {
  const StateId next = walk(current_, bytes);
  if (next == kDead) return false;
  current_ = next;
  return true;
}

bool GrammarMatcher::matches(std::string_view text) {
  const StateId s = walk(start_, text);
  return s != kDead && can_end(s);
}

bool GrammarMatcher::is_prefix(std::string_view text) { return walk(start_, text) != kDead; }

}  // namespace sipllm
