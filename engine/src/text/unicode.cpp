#include "text/unicode.h"

#include <algorithm>
#include <iterator>

namespace sipllm::unicode {
namespace {

#include "text/unicode_tables.inc"

// A code point range [first, last], both ends included.
struct CodePointRange {
  uint32_t first;
  uint32_t last;
};

template <size_t N>
bool in_ranges(uint32_t cp, const CodePointRange (&ranges)[N]) {
  for (const CodePointRange& range : ranges) {
    if (cp >= range.first && cp <= range.last) return true;
  }
  return false;
}

// The letter class of the deepseek-llm pre-tokenizer regex (llama.cpp
// LLAMA_VOCAB_PRE_TYPE_DEEPSEEK_LLM, copied there from the model's
// tokenizer.json): cased letters of selected scripts, written out as ranges.
// Transcribed as code points because some of its characters (U+1F7D, U+1FBE,
// U+1FD3, U+1FDB, U+2126, U+212A) have canonical singleton decompositions and
// would silently change under Unicode normalization if kept as literals.
constexpr CodePointRange kDeepseekLlmLetters[] = {
    {0x41, 0x5a},       {0x61, 0x7a},       {0xb5, 0xb5},       {0xc0, 0xd6},
    {0xd8, 0xf6},       {0xf8, 0x1ba},      {0x1bc, 0x1bf},     {0x1c4, 0x293},
    {0x295, 0x2af},     {0x370, 0x373},     {0x376, 0x377},     {0x37b, 0x37d},
    {0x37f, 0x37f},     {0x386, 0x386},     {0x388, 0x38a},     {0x38c, 0x38c},
    {0x38e, 0x3a1},     {0x3a3, 0x3f5},     {0x3f7, 0x481},     {0x48a, 0x52f},
    {0x531, 0x556},     {0x10a0, 0x10c5},   {0x13a0, 0x13f5},   {0x13f8, 0x13fd},
    {0x1c90, 0x1cba},   {0x1cbd, 0x1cbf},   {0x1d00, 0x1d2b},   {0x1d6b, 0x1d77},
    {0x1d79, 0x1d9a},   {0x1e00, 0x1f15},   {0x1f18, 0x1f1d},   {0x1f20, 0x1f45},
    {0x1f48, 0x1f4d},   {0x1f50, 0x1f57},   {0x1f59, 0x1f59},   {0x1f5b, 0x1f5b},
    {0x1f5d, 0x1f5d},   {0x1f5f, 0x1f7d},   {0x1f80, 0x1fb4},   {0x1fb6, 0x1fbc},
    {0x1fbe, 0x1fbe},   {0x1fc2, 0x1fc4},   {0x1fc6, 0x1fcc},   {0x1fd0, 0x1fd3},
    {0x1fd6, 0x1fdb},   {0x1fe0, 0x1fec},   {0x1ff2, 0x1ff4},   {0x1ff6, 0x1ffc},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210a, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211d},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
    {0x212a, 0x212d},   {0x212f, 0x2134},   {0x2139, 0x2139},   {0x213c, 0x213f},
    {0x2145, 0x2149},   {0x214e, 0x214e},   {0x2183, 0x2184},   {0x2c00, 0x2c7b},
    {0x2c7e, 0x2ce4},   {0x2ceb, 0x2cee},   {0x2cf2, 0x2cf3},   {0xa640, 0xa66d},
    {0xa680, 0xa69b},   {0xa722, 0xa76f},   {0xa771, 0xa787},   {0xa78b, 0xa78e},
    {0xab70, 0xabbf},   {0xfb00, 0xfb06},   {0xfb13, 0xfb17},   {0xff21, 0xff3a},
    {0xff41, 0xff5a},   {0x10400, 0x1044f}, {0x104b0, 0x104d3}, {0x104d8, 0x104fb},
    {0x10c80, 0x10cb2}, {0x10cc0, 0x10cf2}, {0x118a0, 0x118df}, {0x1e900, 0x1e943},
};

// deepseek-llm's punctuation class "[!-/:-~！-／：-～‘-‟　-。]".
constexpr CodePointRange kDeepseekLlmPunctuation[] = {
    {0x21, 0x2f}, {0x3a, 0x7e}, {0xff01, 0xff0f}, {0xff1a, 0xff5e}, {0x2018, 0x201f}, {0x3000, 0x3002},
};

// The CJK/Hangul class "[一-龥ࠀ-一가-퟿]" of both deepseek pre-tokenizers.
constexpr CodePointRange kDeepseekCjk[] = {
    {0x4e00, 0x9fa5}, {0x0800, 0x4e00}, {0xac00, 0xd7ff},
};

// ---------------------------------------------------------------------------
// Pre-tokenizer machinery.

// One character of the text being split: its bytes and its classes.
struct Char {
  size_t begin = 0;  // byte offsets into the text
  size_t end = 0;
  uint32_t cp = 0;   // U+FFFD for an invalid byte
  bool letter = false;
  bool mark = false;  // \p{M}: combining marks
  bool number = false;
  bool space = false;
  bool punctuation = false;
};

// A piece: characters [first, last) of the text.
struct Span {
  size_t first;
  size_t last;
};

// The characters of one piece. Positions outside it read as "no character",
// the way a regex run on that piece alone sees its ends.
class PieceView {
 public:
  PieceView(const std::vector<Char>& chars, Span piece) : chars_(chars), piece_(piece) {}

  size_t first() const { return piece_.first; }
  size_t last() const { return piece_.last; }
  bool inside(size_t pos) const { return pos >= piece_.first && pos < piece_.last; }
  // Code point at pos, or kNone outside the piece.
  uint32_t cp(size_t pos) const { return inside(pos) ? chars_[pos].cp : kNone; }
  bool letter(size_t pos) const { return inside(pos) && chars_[pos].letter; }
  // [\p{L}\p{M}]: a letter or a combining mark.
  bool letter_or_mark(size_t pos) const { return inside(pos) && (chars_[pos].letter || chars_[pos].mark); }
  bool number(size_t pos) const { return inside(pos) && chars_[pos].number; }
  bool space(size_t pos) const { return inside(pos) && chars_[pos].space; }
  // [^\s\p{L}\p{N}]: a character that is neither space, letter nor number.
  bool other(size_t pos) const {
    return inside(pos) && !chars_[pos].space && !chars_[pos].letter && !chars_[pos].number;
  }
  // [^\s\p{L}\p{M}\p{N}]: the same, and not a combining mark either.
  bool other_than_mark(size_t pos) const { return other(pos) && !chars_[pos].mark; }
  const Char& at(size_t pos) const { return chars_[pos]; }

  static constexpr uint32_t kNone = 0xFFFFFFFF;

 private:
  const std::vector<Char>& chars_;
  Span piece_;
};

// Collects the pieces a splitter cuts out of one input piece, dropping empty ones.
class PieceSink {
 public:
  PieceSink(size_t start, std::vector<Span>* out) : previous_end_(start), out_(out) {}
  // Ends the current piece at `end`; returns its length.
  size_t cut(size_t end) {
    const size_t length = end - previous_end_;
    if (length > 0) out_->push_back({previous_end_, end});
    previous_end_ = end;
    return length;
  }

 private:
  size_t previous_end_;
  std::vector<Span>* out_;
};

uint32_t ascii_lower(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') ? cp + ('a' - 'A') : cp; }

// GPT-2's pattern, as llama.cpp's hand-written equivalent:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void split_gpt2(const PieceView& v, std::vector<Span>* out) {
  PieceSink sink(v.first(), out);
  size_t pos = v.first();
  while (pos < v.last()) {
    const uint32_t cp = v.cp(pos);
    // Contractions (case-sensitive here, unlike llama3).
    if (cp == '\'' && pos + 1 < v.last()) {
      const uint32_t next = v.cp(pos + 1);
      if (next == 's' || next == 't' || next == 'm' || next == 'd') {
        pos += sink.cut(pos + 2);
        continue;
      }
      if (pos + 2 < v.last()) {
        const uint32_t after = v.cp(pos + 2);
        if ((next == 'r' && after == 'e') || (next == 'v' && after == 'e') ||
            (next == 'l' && after == 'l')) {
          pos += sink.cut(pos + 3);
          continue;
        }
      }
    }
    // " ?X+": a single leading space joins the run that follows it.
    const size_t run_start = (cp == ' ') ? pos + 1 : pos;
    if (v.letter(run_start)) {
      pos = run_start;
      while (v.letter(pos)) ++pos;
      sink.cut(pos);
      continue;
    }
    if (v.number(run_start)) {
      pos = run_start;
      while (v.number(pos)) ++pos;
      sink.cut(pos);
      continue;
    }
    if (v.other(run_start)) {
      pos = run_start;
      while (v.other(pos)) ++pos;
      sink.cut(pos);
      continue;
    }
    size_t spaces = 0;
    while (v.space(pos + spaces)) ++spaces;
    // \s+(?!\S): before a non-space, the last space stays for the next word.
    if (spaces > 1 && v.inside(pos + spaces)) {
      pos += spaces - 1;
      sink.cut(pos);
      continue;
    }
    if (spaces > 0) {
      pos += spaces;
      sink.cut(pos);
      continue;
    }
    sink.cut(++pos);  // not reachable with the classes above; keeps progress certain
  }
}

// Llama 3's pattern, as llama.cpp's hand-written equivalent:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Qwen2's pattern is the same with \p{N} instead of \p{N}{1,3}
// (max_digits = 1); llama.cpp runs it through std::regex, with the same result.
// Qwen3.5's (llama.cpp's LLAMA_VOCAB_PRE_TYPE_QWEN35) is Qwen2's with
// combining marks in the letter runs and out of the runs of other characters
// (marks_join_letters):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|
//   ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// so "e" + U+0301 stays one word there, where Qwen2's pattern cuts the mark off
// into a piece of its own. The optional first character still only excludes
// \r, \n, letters and numbers: a mark may take that place too, which changes
// nothing, since the run that follows would take it anyway.
void split_llama3(const PieceView& v, size_t max_digits, bool marks_join_letters, std::vector<Span>* out) {
  // \p{L} (or [\p{L}\p{M}]) and [^\s\p{L}\p{N}] (or [^\s\p{L}\p{M}\p{N}]).
  const auto word = [&](size_t pos) { return marks_join_letters ? v.letter_or_mark(pos) : v.letter(pos); };
  const auto other = [&](size_t pos) { return marks_join_letters ? v.other_than_mark(pos) : v.other(pos); };
  PieceSink sink(v.first(), out);
  size_t pos = v.first();
  while (pos < v.last()) {
    const uint32_t cp = v.cp(pos);
    if (cp == '\'' && pos + 1 < v.last()) {
      const uint32_t next = ascii_lower(v.cp(pos + 1));
      if (next == 's' || next == 't' || next == 'm' || next == 'd') {
        pos += sink.cut(pos + 2);
        continue;
      }
      if (pos + 2 < v.last()) {
        const uint32_t after = ascii_lower(v.cp(pos + 2));
        if ((next == 'r' && after == 'e') || (next == 'v' && after == 'e') ||
            (next == 'l' && after == 'l')) {
          pos += sink.cut(pos + 3);
          continue;
        }
      }
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+ (or [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+)
    if (!(cp == '\r' || cp == '\n' || v.number(pos))) {
      if (word(pos) || word(pos + 1)) {
        ++pos;
        while (word(pos)) ++pos;
        sink.cut(pos);
        continue;
      }
    }
    // \p{N}{1,max_digits}
    if (v.number(pos)) {
      size_t group_start = pos;
      while (v.number(pos)) {
        ++pos;
        if (pos - group_start >= max_digits) {
          sink.cut(pos);
          group_start = pos;
        }
      }
      sink.cut(pos);
      continue;
    }
    // " ?[^\s\p{L}\p{N}]+[\r\n]*" (or " ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*")
    const size_t run_start = (cp == ' ') ? pos + 1 : pos;
    if (other(run_start)) {
      pos = run_start;
      while (other(pos)) ++pos;
      while (v.cp(pos) == '\r' || v.cp(pos) == '\n') ++pos;
      sink.cut(pos);
      continue;
    }
    size_t spaces = 0;
    size_t after_last_newline = 0;  // 0: the space run holds no \r or \n
    while (v.space(pos + spaces)) {
      const uint32_t c = v.cp(pos + spaces);
      if (c == '\r' || c == '\n') after_last_newline = pos + spaces + 1;
      ++spaces;
    }
    // \s*[\r\n]+: spaces up to and including the last line break.
    if (after_last_newline > 0) {
      pos = after_last_newline;
      sink.cut(pos);
      continue;
    }
    if (spaces > 1 && v.inside(pos + spaces)) {
      pos += spaces - 1;
      sink.cut(pos);
      continue;
    }
    if (spaces > 0) {
      pos += spaces;
      sink.cut(pos);
      continue;
    }
    sink.cut(++pos);
  }
}

// Runs a regex the way std::regex_iterator does over one piece: the leftmost
// match, then the next one after it; the spans between matches are kept as
// pieces too. match_at(pos) returns the length of the match starting at pos
// (0: none). None of the patterns used can match the empty string.
template <typename MatchAt>
void split_by_matches(const PieceView& v, MatchAt match_at, std::vector<Span>* out) {
  PieceSink sink(v.first(), out);
  size_t pos = v.first();
  while (pos < v.last()) {
    const size_t length = match_at(pos);
    if (length == 0) {
      ++pos;
      continue;
    }
    sink.cut(pos);
    pos += length;
    sink.cut(pos);
  }
  sink.cut(v.last());
}

using CharClass = bool (*)(const Char&);

// Classes of the std::regex-based patterns. llama.cpp runs those patterns on
// a copy of the text where every non-ASCII space is replaced by \v, so no
// class other than \s ever matches a space; hence the !space tests.
bool letter_class(const Char& c) { return c.letter; }
bool number_class(const Char& c) { return c.number; }
bool punctuation_class(const Char& c) { return c.punctuation; }
bool newline_class(const Char& c) { return c.cp == '\r' || c.cp == '\n'; }
bool ascii_digit_class(const Char& c) { return c.cp >= '0' && c.cp <= '9'; }
// [\p{P}\$\+<=>\^~\|]
bool default_punctuation_class(const Char& c) {
  return c.punctuation || c.cp == '$' || c.cp == '+' || c.cp == '<' || c.cp == '=' ||
         c.cp == '>' || c.cp == '^' || c.cp == '~' || c.cp == '|';
}
// [\p{P}\$\+<=>\^~\|`]
bool falcon_punctuation_class(const Char& c) { return default_punctuation_class(c) || c.cp == '`'; }
bool deepseek_llm_letter_class(const Char& c) {
  return !c.space && in_ranges(c.cp, kDeepseekLlmLetters);
}
bool deepseek_llm_punctuation_class(const Char& c) {
  return !c.space && in_ranges(c.cp, kDeepseekLlmPunctuation);
}
bool cjk_class(const Char& c) { return !c.space && in_ranges(c.cp, kDeepseekCjk); }

// X: one character of the class.
void split_each(const PieceView& v, CharClass is_member, std::vector<Span>* out) {
  split_by_matches(v, [&](size_t pos) -> size_t { return is_member(v.at(pos)) ? 1 : 0; }, out);
}

// X+: runs of the class.
void split_runs(const PieceView& v, CharClass is_member, std::vector<Span>* out) {
  split_by_matches(
      v,
      [&](size_t pos) -> size_t {
        size_t end = pos;
        while (end < v.last() && is_member(v.at(end))) ++end;
        return end - pos;
      },
      out);
}

// \s?X+: runs of the class, each taking one space just before it.
void split_space_runs(const PieceView& v, CharClass is_member, std::vector<Span>* out) {
  split_by_matches(
      v,
      [&](size_t pos) -> size_t {
        size_t start = pos;
        if (v.at(pos).space && pos + 1 < v.last() && is_member(v.at(pos + 1))) start = pos + 1;
        size_t end = start;
        while (end < v.last() && is_member(v.at(end))) ++end;
        return end == start ? 0 : end - pos;
      },
      out);
}

// [0-9][0-9][0-9]
void split_three_digits(const PieceView& v, std::vector<Span>* out) {
  split_by_matches(
      v,
      [&](size_t pos) -> size_t {
        if (pos + 3 > v.last()) return 0;
        for (size_t i = pos; i < pos + 3; ++i) {
          if (!ascii_digit_class(v.at(i))) return 0;
        }
        return 3;
      },
      out);
}

// \s+$: the spaces ending the piece become a piece of their own.
void split_trailing_spaces(const PieceView& v, std::vector<Span>* out) {
  size_t start = v.last();
  while (start > v.first() && v.at(start - 1).space) --start;
  PieceSink sink(v.first(), out);
  sink.cut(start);
  sink.cut(v.last());
}

// One regex of a pre-tokenizer's list.
enum class Stage {
  kGpt2,
  kLlama3,
  kQwen2,
  kQwen35,
  kEachNumber,                  // \p{N}
  kNumberRuns,                  // \p{N}+
  kEachNewline,                 // [\r\n]
  kThreeDigits,                 // [0-9][0-9][0-9]
  kDefaultPunctuationRuns,      // [\p{P}\$\+<=>\^~\|]+
  kFalconPunctuationRuns,       // [\p{P}\$\+<=>\^~\|`]+
  kSpaceLetterRuns,             // \s?\p{L}+
  kSpacePunctuationRuns,        // \s?\p{P}+
  kDeepseekLlmLetterRuns,       // \s?[A-Za-zµÀ-Ö...]+
  kDeepseekLlmPunctuationRuns,  // \s?[!-/:-~！-／：-～‘-‟　-。]+
  kTrailingSpaces,              // \s+$
  kCjkRuns,                     // [一-龥ࠀ-一가-퟿]+
};

// The regex lists of llama.cpp's llm_tokenizer_bpe, per pre-tokenizer.
std::vector<Stage> stages_for(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::kGpt2:
      return {Stage::kGpt2};
    case PreTokenizer::kLlama3:
      return {Stage::kLlama3};
    case PreTokenizer::kQwen2:
      return {Stage::kQwen2};
    case PreTokenizer::kQwen35:
      return {Stage::kQwen35};
    case PreTokenizer::kStarcoder:
      return {Stage::kEachNumber, Stage::kGpt2};
    case PreTokenizer::kFalcon:
      return {Stage::kFalconPunctuationRuns, Stage::kGpt2, Stage::kThreeDigits};
    case PreTokenizer::kDeepseekCoder:
      return {Stage::kEachNewline, Stage::kSpaceLetterRuns, Stage::kSpacePunctuationRuns,
              Stage::kCjkRuns, Stage::kEachNumber};
    case PreTokenizer::kDeepseekLlm:
      return {Stage::kEachNewline,    Stage::kDeepseekLlmLetterRuns, Stage::kDeepseekLlmPunctuationRuns,
              Stage::kTrailingSpaces, Stage::kCjkRuns,               Stage::kNumberRuns};
    case PreTokenizer::kDefault:
      break;
  }
  return {Stage::kDefaultPunctuationRuns, Stage::kGpt2, Stage::kNumberRuns, Stage::kThreeDigits};
}

void run_stage(Stage stage, const PieceView& v, std::vector<Span>* out) {
  switch (stage) {
    case Stage::kGpt2: return split_gpt2(v, out);
    case Stage::kLlama3: return split_llama3(v, 3, false, out);
    case Stage::kQwen2: return split_llama3(v, 1, false, out);
    case Stage::kQwen35: return split_llama3(v, 1, true, out);
    case Stage::kEachNumber: return split_each(v, number_class, out);
    case Stage::kNumberRuns: return split_runs(v, number_class, out);
    case Stage::kEachNewline: return split_each(v, newline_class, out);
    case Stage::kThreeDigits: return split_three_digits(v, out);
    case Stage::kDefaultPunctuationRuns: return split_runs(v, default_punctuation_class, out);
    case Stage::kFalconPunctuationRuns: return split_runs(v, falcon_punctuation_class, out);
    case Stage::kSpaceLetterRuns: return split_space_runs(v, letter_class, out);
    case Stage::kSpacePunctuationRuns: return split_space_runs(v, punctuation_class, out);
    case Stage::kDeepseekLlmLetterRuns: return split_space_runs(v, deepseek_llm_letter_class, out);
    case Stage::kDeepseekLlmPunctuationRuns:
      return split_space_runs(v, deepseek_llm_punctuation_class, out);
    case Stage::kTrailingSpaces: return split_trailing_spaces(v, out);
    case Stage::kCjkRuns: return split_runs(v, cjk_class, out);
  }
}

std::vector<Char> decode_chars(std::string_view text) {
  std::vector<Char> chars;
  chars.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    Char c;
    c.begin = pos;
    pos += decode_utf8(text, pos, &c.cp);
    c.end = pos;
    c.space = is_whitespace(c.cp);
    if (!c.space) {
      const Category cat = category(c.cp);
      c.letter = cat == Category::kLetter;
      c.mark = cat == Category::kMark;
      c.number = cat == Category::kNumber;
      c.punctuation = cat == Category::kPunctuation;
    }
    chars.push_back(c);
  }
  return chars;
}

}  // namespace

Category category(uint32_t code_point) {
  if (code_point > kMaxCodePoint) return Category::kUndefined;
  // The last run starting at or before code_point.
  const uint32_t key = (code_point << 3) | 7u;
  const uint32_t* run = std::upper_bound(std::begin(kCategoryRuns), std::end(kCategoryRuns), key);
  if (run == std::begin(kCategoryRuns)) return Category::kUndefined;
  return static_cast<Category>(*(run - 1) & 7u);
}

bool is_whitespace(uint32_t cp) {
  // PropList.txt White_Space (unchanged since Unicode 6.3).
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

size_t utf8_sequence_length(uint8_t lead) {
  static constexpr uint8_t kByHighNibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kByHighNibble[lead >> 4];
}

size_t decode_utf8(std::string_view text, size_t pos, uint32_t* code_point) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  *code_point = kReplacementCharacter;
  if (lead < 0x80) {
    *code_point = lead;
    return 1;
  }
  size_t length = 0;
  uint32_t value = 0;
  uint32_t smallest = 0;  // below this the form is overlong
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2, value = lead & 0x1Fu, smallest = 0x80;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3, value = lead & 0x0Fu, smallest = 0x800;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4, value = lead & 0x07u, smallest = 0x10000;
  } else {
    return 1;  // continuation byte, C0/C1 (always overlong) or F5-FF
  }
  if (text.size() - pos < length) return 1;
  for (size_t i = 1; i < length; ++i) {
    const uint8_t b = byte(pos + i);
    if ((b & 0xC0) != 0x80) return 1;
    value = (value << 6) | (b & 0x3Fu);
  }
  if (value < smallest || value > kMaxCodePoint || (value >= 0xD800 && value <= 0xDFFF)) return 1;
  *code_point = value;
  return length;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp > kMaxCodePoint) cp = kReplacementCharacter;
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t incomplete_utf8_tail(std::string_view bytes) {
  // Walk back over at most three continuation bytes to the lead byte.
  size_t continuations = 0;
  size_t pos = bytes.size();
  while (pos > 0 && continuations < 3 && (static_cast<uint8_t>(bytes[pos - 1]) & 0xC0) == 0x80) {
    --pos;
    ++continuations;
  }
  if (pos == 0) return 0;
  const auto lead = static_cast<uint8_t>(bytes[pos - 1]);
  size_t needed = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    needed = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    needed = 3;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    needed = 4;
  } else {
    return 0;
  }
  const size_t have = continuations + 1;
  return have < needed ? have : 0;
}

uint32_t byte_to_code_point(uint8_t byte) {
  // Printable bytes keep their value; the 68 others (0x00-0x20, 0x7F-0xA0,
  // 0xAD) take U+0100 onwards in byte order.
  if ((byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE) return byte;
  if (byte <= 0x20) return 0x100 + byte;
  if (byte <= 0xA0) return 0x100 + 0x21 + (byte - 0x7F);
  return 0x100 + 0x21 + 0x22;  // 0xAD
}

int code_point_to_byte(uint32_t cp) {
  if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) {
    return static_cast<int>(cp);
  }
  if (cp >= 0x100 && cp <= 0x120) return static_cast<int>(cp - 0x100);
  if (cp >= 0x121 && cp <= 0x142) return static_cast<int>(0x7F + (cp - 0x121));
  if (cp == 0x143) return 0xAD;
  return -1;
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(byte_to_code_point(static_cast<uint8_t>(c)), &out);
  return out;
}

std::vector<std::string_view> pre_tokenize(PreTokenizer kind, std::string_view text) {
  std::vector<std::string_view> result;
  if (text.empty()) return result;
  const std::vector<Char> chars = decode_chars(text);

  std::vector<Span> pieces = {{0, chars.size()}};
  std::vector<Span> next;
  for (Stage stage : stages_for(kind)) {
    next.clear();
    next.reserve(pieces.size() * 2);
    for (const Span& piece : pieces) run_stage(stage, PieceView(chars, piece), &next);
    pieces.swap(next);
  }

  result.reserve(pieces.size());
  for (const Span& piece : pieces) {
    const size_t begin = chars[piece.first].begin;
    result.push_back(text.substr(begin, chars[piece.last - 1].end - begin));
  }
  return result;
}

}  // namespace sipllm::unicode
