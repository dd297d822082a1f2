// Tokenizers built from GGUF metadata; see tokenizer.h.
//
// Both models follow llama.cpp (src/llama-vocab.cpp) closely, because the
// reference token ids the tests compare against are what llama.cpp produces:
// the same special-token partition, the same merge order and tie-breaks, the
// same byte fallback. Where this code chooses differently (it never throws on
// odd input text, keeps invalid UTF-8 bytes instead of turning them into
// U+FFFD, and never assembles a control token out of plain text) a comment
// says so.
#include "text/tokenizer.h"

#include <algorithm>
#include <optional>
#include <queue>
#include <unordered_map>

#include "model/gguf.h"
#include "sipllm/error.h"
#include "text/unicode.h"

namespace sipllm {
namespace {

constexpr const char* kKeyModel = "tokenizer.ggml.model";
constexpr const char* kKeyPre = "tokenizer.ggml.pre";
constexpr const char* kKeyTokens = "tokenizer.ggml.tokens";
constexpr const char* kKeyScores = "tokenizer.ggml.scores";
constexpr const char* kKeyTokenType = "tokenizer.ggml.token_type";
constexpr const char* kKeyMerges = "tokenizer.ggml.merges";
constexpr const char* kKeyBos = "tokenizer.ggml.bos_token_id";
constexpr const char* kKeyEos = "tokenizer.ggml.eos_token_id";
constexpr const char* kKeyUnknown = "tokenizer.ggml.unknown_token_id";
constexpr const char* kKeyPadding = "tokenizer.ggml.padding_token_id";
constexpr const char* kKeyEot = "tokenizer.ggml.eot_token_id";
constexpr const char* kKeyEom = "tokenizer.ggml.eom_token_id";
constexpr const char* kKeyAddBos = "tokenizer.ggml.add_bos_token";
constexpr const char* kKeyAddEos = "tokenizer.ggml.add_eos_token";
constexpr const char* kKeyAddSpacePrefix = "tokenizer.ggml.add_space_prefix";

// SentencePiece writes a space as U+2581 LOWER ONE EIGHTH BLOCK.
constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";

[[noreturn]] void format_error(const std::string& message) {
  throw Error(ErrorKind::kFormat, message);
}

[[noreturn]] void unsupported_error(const std::string& message) {
  throw Error(ErrorKind::kUnsupported, message);
}

// DeepSeek's end of sentence, "<｜end▁of▁sentence｜>" (fullwidth bars).
constexpr std::string_view kDeepseekEndOfSentence =
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";

// Texts llama.cpp treats as end-of-turn markers whatever their metadata says
// (llama_vocab::impl::load, "special_eog_ids"); it also forces them to be
// control tokens, so plain text can never produce them.
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>",      "<|im_end|>",          "<|end|>", "<end_of_turn>",
    "<|endoftext|>",   "<|eom_id|>",          "<EOT>",   "_<EOT>",
    "<|end_of_text|>", "<end_of_utterance>",  kDeepseekEndOfSentence,
};

bool is_c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// The merge loop both BPE flavours share. `text` starts as consecutive spans
// of `lengths` bytes; the adjacent pair with the highest priority (the
// leftmost on ties) joins, again and again, until no pair may. `priority`
// returns std::nullopt for a pair that may not join. Returns the final spans.
template <class Priority>
std::vector<std::string_view> merge_adjacent(std::string_view text, const std::vector<size_t>& lengths,
                                             const Priority& priority) {
  struct Symbol {
    size_t begin;
    size_t length;  // 0 once merged into its left neighbour
    int prev;
    int next;
  };
  struct Pair {
    int left;
    int right;
    double priority;
    size_t length;  // of the joined text; tells a stale entry apart
  };
  struct LowerPriority {
    bool operator()(const Pair& a, const Pair& b) const {
      return a.priority < b.priority || (a.priority == b.priority && a.left > b.left);
    }
  };

  if (lengths.empty()) return {};
  std::vector<Symbol> symbols;
  symbols.reserve(lengths.size());
  size_t offset = 0;
  for (size_t length : lengths) {
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({offset, length, index - 1, index + 1});
    offset += length;
  }
  symbols.back().next = -1;
  const auto text_of = [&](const Symbol& s) { return text.substr(s.begin, s.length); };

  std::priority_queue<Pair, std::vector<Pair>, LowerPriority> queue;
  const auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::optional<double> p = priority(text_of(symbols[left]), text_of(symbols[right]));
    if (p) queue.push({left, right, *p, symbols[left].length + symbols[right].length});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));

  while (!queue.empty()) {
    const Pair pair = queue.top();
    queue.pop();
    Symbol& left = symbols[pair.left];
    Symbol& right = symbols[pair.right];
    // Skip a pair whose side was merged away or has grown since it was queued.
    if (left.length == 0 || right.length == 0 || left.length + right.length != pair.length) continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = pair.left;
    try_add(left.prev, pair.left);
    try_add(pair.left, left.next);
  }

  std::vector<std::string_view> spans;
  for (int i = 0; i != -1; i = symbols[i].next) spans.push_back(text_of(symbols[i]));
  return spans;
}

std::string lowercase_ascii(std::string text) {
  for (char& c : text) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return text;
}

// "<0xAB>" -> 0xAB; -1 if the text is not of that form.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = text[i];
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

// Both models share the vocabulary bookkeeping: metadata loading, the text
// to id map, and the special-token partition of the input.
class VocabularyTokenizer : public Tokenizer {
 public:
  VocabularyTokenizer(const VocabularyTokenizer&) = delete;
  VocabularyTokenizer& operator=(const VocabularyTokenizer&) = delete;

 protected:
  // Defaults the model kind supplies before the metadata overrides them.
  struct Defaults {
    int32_t bos;
    int32_t eos;
    int32_t unknown;
    bool add_bos;
  };

  // A run of input text still to tokenize, or a special token matched in it.
  struct Fragment {
    size_t begin;
    size_t end;
    int32_t token;  // -1 for text
  };

  VocabularyTokenizer() = default;

  void load_common(const GgufFile& file, const Defaults& defaults);

  // tokens_ index of an id from the caller; an id outside the vocabulary is
  // the caller's error, reported rather than crashing.
  size_t checked_index(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) {
      throw Error(ErrorKind::kInvalidArgument, "token id " + std::to_string(id) +
                                                   " is outside the vocabulary of " +
                                                   std::to_string(tokens_.size()) + " tokens");
    }
    return static_cast<size_t>(id);
  }

  // Id of a token text, or -1.
  int32_t find_token(std::string_view text) const {
    const auto it = token_ids_.find(text);
    return it == token_ids_.end() ? -1 : it->second;
  }

  // Id of a token the model may produce from plain text, or -1. Control and
  // unknown tokens are never the result of a merge: text can only reach them
  // through the special-token partition, with parse_special. (llama.cpp looks
  // up any token here; no vocabulary we test can tell the difference, since
  // its merges never assemble such a token.)
  int32_t find_text_token(std::string_view text) const {
    const int32_t id = find_token(text);
    if (id < 0) return -1;
    const TokenType type = types_[static_cast<size_t>(id)];
    return (type == TokenType::kControl || type == TokenType::kUnknown) ? -1 : id;
  }

  // llama.cpp's tokenizer_st_partition: special tokens, longest text first,
  // cut out of the text fragments left by the longer ones. User-defined tokens
  // are always matched; control and unknown ones only with parse_special.
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;

  int32_t unknown_ = -1;

 private:
  std::unordered_map<std::string_view, int32_t> token_ids_;  // views into tokens_
  std::vector<int32_t> special_tokens_;                       // longest text first
  std::vector<uint8_t> strip_right_;  // per token: eat the spaces after a match
};

// Reads an optional special-token id. A missing key keeps the default (which
// is dropped if the vocabulary is too small for it, as llama.cpp does); -1 or
// 0xFFFFFFFF means "none" (converters write that); any other value must be a
// valid id.
int32_t read_special_id(const GgufFile& file, const char* key, int32_t fallback, size_t n_tokens) {
  const GgufValue* value = file.find(key);
  if (value == nullptr) {
    return (fallback >= 0 && static_cast<size_t>(fallback) < n_tokens) ? fallback : -1;
  }
  if (!value->is_integer()) format_error(std::string("metadata key '") + key + "' must be an integer");
  if (value->integer < 0 || (value->type != GgufType::kUint64 && value->integer == 0xFFFFFFFFll) ||
      (value->type == GgufType::kUint64 && value->unsigned_integer == 0xFFFFFFFFull)) {
    return -1;
  }
  const uint64_t id = value->type == GgufType::kUint64 ? value->unsigned_integer
                                                       : static_cast<uint64_t>(value->integer);
  if (id >= n_tokens) {
    format_error(std::string("metadata key '") + key + "' = " + std::to_string(id) +
                 " is out of range: the vocabulary has " + std::to_string(n_tokens) + " tokens");
  }
  return static_cast<int32_t>(id);
}

void VocabularyTokenizer::load_common(const GgufFile& file, const Defaults& defaults) {
  tokens_ = file.require_array(kKeyTokens, GgufType::kString).strings;
  if (tokens_.empty()) format_error(std::string("metadata key '") + kKeyTokens + "' is empty");
  if (tokens_.size() > static_cast<size_t>(INT32_MAX)) {
    format_error(std::string("metadata key '") + kKeyTokens + "' has too many tokens");
  }
  const size_t n = tokens_.size();

  types_.assign(n, TokenType::kNormal);
  if (const GgufValue* types = file.find_array(kKeyTokenType, GgufType::kInt32)) {
    if (types->integers.size() != n) {
      format_error(std::string("metadata key '") + kKeyTokenType + "' has " +
                   std::to_string(types->integers.size()) + " entries but '" + kKeyTokens +
                   "' has " + std::to_string(n));
    }
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = types->integers[i];
      types_[i] = (t >= 0 && t <= static_cast<int64_t>(TokenType::kByte)) ? static_cast<TokenType>(t)
                                                                          : TokenType::kUndefined;
    }
  }

  // Duplicate texts: the first id wins; empty texts are never looked up (an
  // empty special token would match everywhere).
  token_ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (!tokens_[i].empty()) token_ids_.emplace(tokens_[i], static_cast<int32_t>(i));
  }

  bos_ = read_special_id(file, kKeyBos, defaults.bos, n);
  eos_ = read_special_id(file, kKeyEos, defaults.eos, n);
  unknown_ = read_special_id(file, kKeyUnknown, defaults.unknown, n);
  read_special_id(file, kKeyPadding, -1, n);  // validated only; nothing uses it here
  const int32_t eot = read_special_id(file, kKeyEot, -1, n);
  const int32_t eom = read_special_id(file, kKeyEom, -1, n);

  add_bos_ = file.get_bool(kKeyAddBos, defaults.add_bos);
  add_eos_ = file.get_bool(kKeyAddEos, false);
  if (add_bos_ && bos_ < 0) {
    format_error(std::string("metadata key '") + kKeyAddBos + "' is true but '" + kKeyBos +
                 "' names no token");
  }
  if (add_eos_ && eos_ < 0) {
    format_error(std::string("metadata key '") + kKeyAddEos + "' is true but '" + kKeyEos +
                 "' names no token");
  }

  // End of generation, as llama.cpp decides it: the EOS, EOT and EOM ids, and
  // every token whose text is a known end-of-turn marker (which covers the
  // EOT and EOM tokens llama.cpp guesses by text when the keys are missing).
  // Those marker tokens become control tokens.
  for (std::string_view text : kEndOfGenerationTexts) {
    const int32_t id = find_token(text);
    if (id < 0) continue;
    end_of_generation_.push_back(id);
    types_[static_cast<size_t>(id)] = TokenType::kControl;
  }
  for (int32_t id : {eos_, eot, eom}) {
    if (id >= 0) end_of_generation_.push_back(id);
  }
  std::sort(end_of_generation_.begin(), end_of_generation_.end());
  end_of_generation_.erase(std::unique(end_of_generation_.begin(), end_of_generation_.end()),
                           end_of_generation_.end());

  for (size_t i = 0; i < n; ++i) {
    const TokenType t = types_[i];
    if ((t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown) &&
        !tokens_[i].empty()) {
      special_tokens_.push_back(static_cast<int32_t>(i));
    }
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(), [&](int32_t a, int32_t b) {
    return tokens_[static_cast<size_t>(a)].size() > tokens_[static_cast<size_t>(b)].size();
  });

  // llama.cpp's per-model strip attributes (its other one, LSTRIP, is only set
  // for models we do not load). Phi-3's chat template puts a
  // newline after each special token that the model never saw: its special
  // tokens eat the spaces after them, except <unk>, <s> and <|endoftext|>.
  strip_right_.assign(n, 0);
  const std::string model_name = lowercase_ascii(file.get_string("general.name", ""));
  if (model_name.find("phi-3") != std::string::npos || model_name.find("phi3") != std::string::npos) {
    for (int32_t id : special_tokens_) strip_right_[static_cast<size_t>(id)] = 1;
    if (const int32_t id = find_token("</s>"); id >= 0) strip_right_[static_cast<size_t>(id)] = 1;
    for (std::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (const int32_t id = find_token(text); id >= 0) strip_right_[static_cast<size_t>(id)] = 0;
    }
  }
}

std::vector<VocabularyTokenizer::Fragment> VocabularyTokenizer::partition(std::string_view text,
                                                                           bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({0, text.size(), -1});
  std::vector<Fragment> next;
  for (int32_t id : special_tokens_) {
    const TokenType type = types_[static_cast<size_t>(id)];
    if (!parse_special && type != TokenType::kUserDefined) continue;
    const std::string& needle = tokens_[static_cast<size_t>(id)];
    const bool strip_right = strip_right_[static_cast<size_t>(id)] != 0;

    next.clear();
    for (const Fragment& fragment : fragments) {
      if (fragment.token >= 0) {
        next.push_back(fragment);
        continue;
      }
      size_t begin = fragment.begin;
      const size_t end = fragment.end;
      while (begin < end) {
        const size_t match = text.substr(0, end).find(needle, begin);
        if (match == std::string_view::npos) break;
        if (match > begin) next.push_back({begin, match, -1});
        next.push_back({match, match + needle.size(), id});
        begin = match + needle.size();
        if (strip_right) {
          while (begin < end && is_c_space(text[begin])) ++begin;
        }
      }
      if (begin < end) next.push_back({begin, end, -1});
    }
    fragments.swap(next);
  }
  return fragments;
}

// ---------------------------------------------------------------------------
// SentencePiece (tokenizer.ggml.model = "llama"), as llama.cpp's
// llm_tokenizer_spm: start from UTF-8 characters and repeatedly merge the
// adjacent pair whose concatenation is the vocabulary token with the highest
// score (leftmost on ties); a final piece missing from the vocabulary falls
// back to <0xXX> byte tokens.
class SentencePieceTokenizer final : public VocabularyTokenizer {
 public:
  explicit SentencePieceTokenizer(const GgufFile& file) {
    load_common(file, Defaults{/*bos=*/1, /*eos=*/2, /*unknown=*/0, /*add_bos=*/true});
    const size_t n = tokens_.size();
    const GgufValue* scores = file.find(kKeyScores);
    if (scores == nullptr) format_error(std::string("missing required metadata key '") + kKeyScores + "'");
    if (scores->type != GgufType::kArray || !(scores->reals.size() == scores->array_size() ||
                                              scores->integers.size() == scores->array_size())) {
      format_error(std::string("metadata key '") + kKeyScores + "' must be an array of numbers");
    }
    if (scores->array_size() != n) {
      format_error(std::string("metadata key '") + kKeyScores + "' has " +
                   std::to_string(scores->array_size()) + " entries but '" + kKeyTokens + "' has " +
                   std::to_string(n));
    }
    scores_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      scores_[i] = scores->reals.empty() ? static_cast<float>(scores->integers[i])
                                         : static_cast<float>(scores->reals[i]);
    }
    add_space_prefix_ = file.get_bool(kKeyAddSpacePrefix, true);

    // llama.cpp's byte_to_token: "<0xXX>", else the byte itself as a token.
    static const char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      int32_t id = find_token(std::string_view(name, sizeof(name)));
      if (id < 0) id = find_text_token(std::string(1, static_cast<char>(b)));
      byte_tokens_[static_cast<size_t>(b)] = id;
    }
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override {
    std::vector<int32_t> ids;
    if (add_special && add_bos_) ids.push_back(bos_);
    // The space prefix goes before the first text and after every special token.
    bool after_special = true;
    std::string piece;
    for (const Fragment& fragment : partition(text, parse_special)) {
      if (fragment.token >= 0) {
        ids.push_back(fragment.token);
        after_special = true;
        continue;
      }
      piece.clear();
      if (add_space_prefix_ && after_special) piece += kSpaceMarker;
      for (char c : text.substr(fragment.begin, fragment.end - fragment.begin)) {
        if (c == ' ') {
          piece += kSpaceMarker;
        } else {
          piece += c;
        }
      }
      encode_piece(piece, &ids);
      after_special = false;
    }
    if (add_special && add_eos_) ids.push_back(eos_);
    return ids;
  }

  std::string token_bytes(int32_t id) const override {
    const std::string& text = tokens_[checked_index(id)];
    switch (types_[static_cast<size_t>(id)]) {
      case TokenType::kNormal: {
        std::string out;
        out.reserve(text.size());
        size_t pos = 0;
        while (pos < text.size()) {
          if (text.compare(pos, kSpaceMarker.size(), kSpaceMarker) == 0) {
            out += ' ';
            pos += kSpaceMarker.size();
          } else {
            out += text[pos++];
          }
        }
        return out;
      }
      case TokenType::kUserDefined:
        return text;
      case TokenType::kByte: {
        const int byte = parse_byte_token(text);
        return byte < 0 ? text : std::string(1, static_cast<char>(byte));
      }
      default:  // control, unknown, unused, undefined: no text, as in llama.cpp
        return "";
    }
  }

  bool strips_leading_space() const override { return add_space_prefix_; }
  std::string kind() const override { return "llama (SentencePiece BPE)"; }

 private:
  void encode_piece(std::string_view piece, std::vector<int32_t>* ids) const {
    if (piece.empty()) return;
    // Start from characters. A byte that is not valid UTF-8 is a character of
    // its own (llama.cpp sizes characters by the lead byte alone, which lets a
    // bad byte swallow the "▁" after it); for valid text both agree.
    std::vector<size_t> lengths;
    lengths.reserve(piece.size());
    for (size_t offset = 0; offset < piece.size(); offset += lengths.back()) {
      uint32_t code_point = 0;
      lengths.push_back(unicode::decode_utf8(piece, offset, &code_point));
    }
    // A pair joins when the vocabulary has the joined text; the higher its
    // score, the sooner.
    const auto score_of_join = [&](std::string_view left, std::string_view right) -> std::optional<double> {
      const int32_t id = find_text_token(std::string_view(left.data(), left.size() + right.size()));
      if (id < 0) return std::nullopt;
      return scores_[static_cast<size_t>(id)];
    };

    for (const std::string_view text : merge_adjacent(piece, lengths, score_of_join)) {
      const int32_t id = find_text_token(text);
      if (id >= 0) {
        ids->push_back(id);
        continue;
      }
      // Byte fallback. A vocabulary without byte tokens (llama.cpp would throw
      // here) gives one unknown token for the character instead.
      bool all_bytes = true;
      for (char c : text) all_bytes = all_bytes && byte_tokens_[static_cast<uint8_t>(c)] >= 0;
      if (all_bytes) {
        for (char c : text) ids->push_back(byte_tokens_[static_cast<uint8_t>(c)]);
      } else if (unknown_ >= 0) {
        ids->push_back(unknown_);
      }
    }
  }

  std::vector<float> scores_;
  bool add_space_prefix_ = true;
  int32_t byte_tokens_[256] = {};
};

// ---------------------------------------------------------------------------
// Byte-level BPE (tokenizer.ggml.model = "gpt2"), as llama.cpp's
// llm_tokenizer_bpe: split with the pre-tokenizer, write each piece's bytes in
// GPT-2's printable alphabet, then merge adjacent symbols by merge rank
// (lowest first, leftmost on ties).
class ByteLevelBpeTokenizer final : public VocabularyTokenizer {
 public:
  explicit ByteLevelBpeTokenizer(const GgufFile& file) {
    pre_name_ = file.get_string(kKeyPre, "");
    configure_pre_tokenizer(pre_name_);
    load_common(file, Defaults{/*bos=*/-1, /*eos=*/-1, /*unknown=*/-1, /*add_bos=*/default_add_bos_});

    const GgufValue& merges = file.require_array(kKeyMerges, GgufType::kString);
    merge_ranks_.reserve(merges.strings.size());
    for (size_t rank = 0; rank < merges.strings.size(); ++rank) {
      const std::string& line = merges.strings[rank];
      // "left right", split at the first space after the first byte. The line
      // itself is the lookup key; a line without a separator can never match
      // (llama.cpp files it under an empty pair) and is skipped. The first
      // occurrence of a pair keeps its rank.
      if (line.size() < 3 || line.find(' ', 1) == std::string::npos) continue;
      merge_ranks_.emplace(line, static_cast<int32_t>(rank));
    }
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override {
    std::vector<int32_t> ids;
    if (add_special && add_bos_) ids.push_back(bos_);
    std::string key_buffer;
    for (const Fragment& fragment : partition(text, parse_special)) {
      if (fragment.token >= 0) {
        ids.push_back(fragment.token);
        continue;
      }
      const std::string_view raw = text.substr(fragment.begin, fragment.end - fragment.begin);
      for (std::string_view word : unicode::pre_tokenize(pre_tokenizer_, raw)) {
        encode_word(unicode::byte_level_encode(word), &key_buffer, &ids);
      }
    }
    if (add_special && add_eos_) ids.push_back(eos_);
    return ids;
  }

  std::string token_bytes(int32_t id) const override {
    const std::string& text = tokens_[checked_index(id)];
    switch (types_[static_cast<size_t>(id)]) {
      case TokenType::kNormal: {
        // Map each alphabet code point back to its byte. A code point outside
        // the alphabet (llama.cpp prints "[UNK_BYTE_..]") is kept as UTF-8.
        std::string out;
        out.reserve(text.size());
        size_t pos = 0;
        while (pos < text.size()) {
          uint32_t cp = 0;
          const size_t length = unicode::decode_utf8(text, pos, &cp);
          const int byte = unicode::code_point_to_byte(cp);
          if (byte >= 0 && length > 0) {
            out += static_cast<char>(byte);
          } else {
            out.append(text, pos, length);
          }
          pos += length;
        }
        return out;
      }
      case TokenType::kUserDefined:
        return text;
      case TokenType::kByte: {
        const int byte = parse_byte_token(text);
        return byte < 0 ? text : std::string(1, static_cast<char>(byte));
      }
      default:
        return "";
    }
  }

  bool strips_leading_space() const override { return false; }

  std::string kind() const override {
    return "gpt2 (byte-level BPE, pre-tokenizer " + (pre_name_.empty() ? std::string("default") : pre_name_) +
           ")";
  }

 private:
  // tokenizer.ggml.pre -> llama.cpp's regex list (and its per-model flags).
  void configure_pre_tokenizer(const std::string& pre) {
    using unicode::PreTokenizer;
    static const struct {
      const char* name;
      PreTokenizer kind;
    } kNames[] = {
        {"default", PreTokenizer::kGpt2},
        {"gpt-2", PreTokenizer::kGpt2},
        {"phi-2", PreTokenizer::kGpt2},
        {"mpt", PreTokenizer::kGpt2},
        {"olmo", PreTokenizer::kGpt2},
        {"jais", PreTokenizer::kGpt2},
        {"llama3", PreTokenizer::kLlama3},
        {"llama-v3", PreTokenizer::kLlama3},
        {"llama-bpe", PreTokenizer::kLlama3},
        {"falcon3", PreTokenizer::kLlama3},
        {"pixtral", PreTokenizer::kLlama3},
        {"dbrx", PreTokenizer::kLlama3},
        {"smaug-bpe", PreTokenizer::kLlama3},
        {"qwen2", PreTokenizer::kQwen2},
        {"deepseek-r1-qwen", PreTokenizer::kQwen2},
        {"stablelm2", PreTokenizer::kQwen2},
        {"megrez", PreTokenizer::kQwen2},
        {"starcoder", PreTokenizer::kStarcoder},
        {"refact", PreTokenizer::kStarcoder},
        {"command-r", PreTokenizer::kStarcoder},
        {"smollm", PreTokenizer::kStarcoder},
        {"codeshell", PreTokenizer::kStarcoder},
        {"exaone", PreTokenizer::kStarcoder},
        {"minerva-7b", PreTokenizer::kStarcoder},
        {"falcon", PreTokenizer::kFalcon},
        {"deepseek-coder", PreTokenizer::kDeepseekCoder},
        {"deepseek-llm", PreTokenizer::kDeepseekLlm},
    };
    // A missing or "default" value means an old conversion, before the key
    // existed: those are GPT-2 style vocabularies (GPT-NeoX, MPT, ...), and
    // GPT-2's splits reproduce their Hugging Face tokenizers. llama.cpp uses
    // a cruder list of its own here (PreTokenizer::kDefault) and warns that
    // quality will suffer: on the GPT-NeoX vocabulary it gets 13 of MPT's 46
    // test cases wrong, GPT-2's splits none.
    if (pre.empty()) {
      pre_tokenizer_ = PreTokenizer::kGpt2;
      return;
    }
    for (const auto& entry : kNames) {
      if (pre == entry.name) {
        pre_tokenizer_ = entry.kind;
        // Llama 3 style vocabularies: a piece that is a token as a whole is
        // taken as is (Hugging Face's ignore_merges), and BOS is on by default.
        const bool llama3_family = pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" ||
                                   pre == "falcon3" || pre == "pixtral";
        ignore_merges_ = llama3_family;
        default_add_bos_ = llama3_family;
        return;
      }
    }
    unsupported_error(std::string("metadata key '") + kKeyPre + "' = '" + pre +
                      "': unsupported pre-tokenizer");
  }

  int32_t find_rank(std::string_view left, std::string_view right, std::string* key) const {
    key->assign(left);
    key->push_back(' ');
    key->append(right);
    const auto it = merge_ranks_.find(*key);
    return it == merge_ranks_.end() ? -1 : it->second;
  }

  void encode_word(const std::string& word, std::string* key, std::vector<int32_t>* ids) const {
    if (word.empty()) return;
    if (ignore_merges_) {
      const int32_t id = find_text_token(word);
      if (id >= 0) {
        ids->push_back(id);
        return;
      }
    }
    std::vector<size_t> lengths;
    lengths.reserve(word.size());
    for (size_t offset = 0; offset < word.size(); offset += lengths.back()) {
      lengths.push_back(
          std::min(unicode::utf8_sequence_length(static_cast<uint8_t>(word[offset])), word.size() - offset));
    }
    // A pair joins when the merge list has it; the lower its rank, the sooner.
    const auto rank_of_join = [&](std::string_view left, std::string_view right) -> std::optional<double> {
      const int32_t rank = find_rank(left, right, key);
      if (rank < 0) return std::nullopt;
      return -static_cast<double>(rank);
    };

    for (const std::string_view text : merge_adjacent(word, lengths, rank_of_join)) {
      const int32_t id = find_text_token(text);
      if (id >= 0) {
        ids->push_back(id);
        continue;
      }
      // A merge result missing from the vocabulary: fall back to its
      // characters (llama.cpp looks up its single bytes, which for a byte-level
      // vocabulary only ever finds ASCII ones), else the unknown token.
      size_t pos = 0;
      while (pos < text.size()) {
        const size_t length = std::min(unicode::utf8_sequence_length(static_cast<uint8_t>(text[pos])),
                                       text.size() - pos);
        const int32_t char_id = find_text_token(text.substr(pos, length));
        if (char_id >= 0) {
          ids->push_back(char_id);
        } else if (unknown_ >= 0) {
          ids->push_back(unknown_);
        }
        pos += length;
      }
    }
  }

  std::string pre_name_;
  unicode::PreTokenizer pre_tokenizer_ = unicode::PreTokenizer::kDefault;
  bool ignore_merges_ = false;
  bool default_add_bos_ = false;
  std::unordered_map<std::string, int32_t> merge_ranks_;  // "left right" -> rank
};

// Appends `bytes` to `out` with every byte that is not part of a well-formed
// UTF-8 sequence replaced by U+FFFD, so streamed text is always valid UTF-8.
void append_valid_utf8(std::string_view bytes, std::string* out) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    uint32_t cp = 0;
    const size_t length = unicode::decode_utf8(bytes, pos, &cp);
    if (cp == unicode::kReplacementCharacter && length == 1) {
      unicode::append_utf8(unicode::kReplacementCharacter, out);
    } else {
      out->append(bytes.substr(pos, length));
    }
    pos += length;
  }
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
  const std::string model = file.require_string(kKeyModel);
  if (model == "llama") return std::make_unique<SentencePieceTokenizer>(file);
  if (model == "gpt2") return std::make_unique<ByteLevelBpeTokenizer>(file);
  unsupported_error(std::string("metadata key '") + kKeyModel + "' = '" + model +
                    "': unsupported tokenizer model (supported: llama, gpt2)");
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  bool at_start = strips_leading_space();
  for (int32_t id : ids) {
    std::string piece = token_bytes(id);
    // The prefix space belongs to the first token that has text at all; a BOS
    // or other control token before it gives nothing and does not count.
    if (at_start && !piece.empty()) {
      if (piece[0] == ' ') piece.erase(0, 1);
      at_start = false;
    }
    text += piece;
  }
  return text;
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return std::binary_search(end_of_generation_.begin(), end_of_generation_.end(), id);
}

std::string TextDecoder::push(int32_t id) {
  std::string piece = tokenizer_.token_bytes(id);
  // Same leading-space rule as decode(): only the first piece with text counts.
  if (at_start_ && !piece.empty()) {
    if (tokenizer_.strips_leading_space() && piece[0] == ' ') piece.erase(0, 1);
    at_start_ = false;
  }
  pending_ += piece;
  const size_t held = unicode::incomplete_utf8_tail(pending_);
  std::string out;
  append_valid_utf8(std::string_view(pending_).substr(0, pending_.size() - held), &out);
  pending_.erase(0, pending_.size() - held);
  return out;
}

std::string TextDecoder::flush() {
  std::string out;
  if (!pending_.empty()) unicode::append_utf8(unicode::kReplacementCharacter, &out);
  pending_.clear();
  return out;
}

}  // namespace sipllm
