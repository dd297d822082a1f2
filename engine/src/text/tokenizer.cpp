// Tokenizers built from GGUF metadata; see tokenizer.h.
//
// The models follow llama.cpp (src/llama-vocab.cpp) closely, because the
// reference token ids the tests compare against are what llama.cpp produces:
// the same special-token partition, the same merge order and tie-breaks, the
// same byte fallback. Where this code chooses differently (it never throws on
// odd input text, keeps invalid UTF-8 bytes instead of turning them into
// U+FFFD, and never assembles a control token out of plain text) a comment
// says so.
#include "text/tokenizer.h"

#include <algorithm>

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

// DeepSeek's "<｜end▁of▁sentence｜>" and FIM markers (fullwidth bars, "▁").
#define SIPLLM_FULLWIDTH_BAR "\xEF\xBD\x9C"
#define SIPLLM_SPACE_MARKER "\xE2\x96\x81"

// Texts llama.cpp's vocabulary loader (llama_vocab::impl::load) takes as the
// end of a turn whatever the metadata says: every token with one of these
// texts ends generation and becomes a control token, so that plain text can
// never produce it. (Its separate EOT and EOM guesses use texts that are all
// in this list, so they add nothing to it.)
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>",  "<|im_end|>",    "<|end|>",        "<|return|>",      "<|call|>",
    "<|flush|>",   "<|calls|>",     "<end_of_turn>",  "<|endoftext|>",   "</s>",
    "<|eom_id|>",  "<EOT>",         "_<EOT>",         "[EOT]",           "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>",         "<|tool_response>",
    "<" SIPLLM_FULLWIDTH_BAR "end" SIPLLM_SPACE_MARKER "of" SIPLLM_SPACE_MARKER "sentence" SIPLLM_FULLWIDTH_BAR ">",
    "[e~[",
};

// Fill-in-the-middle roles. When the role's key is absent, llama.cpp takes a
// token with one of the texts for it and makes it a control token; the pad,
// repository and file-separator tokens also end generation.
struct FimRole {
  const char* key;
  const char* deprecated_key;  // or nullptr
  bool ends_generation;
  std::vector<std::string_view> texts;
};

const std::vector<FimRole>& fim_roles() {
  static const std::vector<FimRole> roles = {
      {"tokenizer.ggml.fim_pre_token_id", "tokenizer.ggml.prefix_token_id", false,
       {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<" SIPLLM_FULLWIDTH_BAR "fim" SIPLLM_SPACE_MARKER
        "begin" SIPLLM_FULLWIDTH_BAR ">", "<PRE>", SIPLLM_SPACE_MARKER "<PRE>", "<|code_prefix|>", "<|prefix|>"}},
      {"tokenizer.ggml.fim_suf_token_id", "tokenizer.ggml.suffix_token_id", false,
       {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<" SIPLLM_FULLWIDTH_BAR "fim" SIPLLM_SPACE_MARKER
        "hole" SIPLLM_FULLWIDTH_BAR ">", "<SUF>", SIPLLM_SPACE_MARKER "<SUF>", "<|code_suffix|>", "<|suffix|>"}},
      {"tokenizer.ggml.fim_mid_token_id", "tokenizer.ggml.middle_token_id", false,
       {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<" SIPLLM_FULLWIDTH_BAR "fim" SIPLLM_SPACE_MARKER
        "end" SIPLLM_FULLWIDTH_BAR ">", "<MID>", SIPLLM_SPACE_MARKER "<MID>", "<|code_middle|>", "<|middle|>"}},
      {"tokenizer.ggml.fim_pad_token_id", nullptr, true, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
      {"tokenizer.ggml.fim_rep_token_id", nullptr, true,
       {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
      {"tokenizer.ggml.fim_sep_token_id", nullptr, true, {"<|file_sep|>"}},
  };
  return roles;
}

#undef SIPLLM_FULLWIDTH_BAR
#undef SIPLLM_SPACE_MARKER

bool is_c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// ---------------------------------------------------------------------------
// Lookup tables. A vocabulary has up to a few hundred thousand tokens and a
// byte-level one as many merges; node-based maps cost an allocation per entry
// to build and a pointer chase per probe, which made up most of the time to
// load a vocabulary and to encode with it. These are open-addressing tables
// with linear probing, sized once from the entry count.

uint64_t mix64(uint64_t h) {
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ull;
  return h ^ (h >> 33);
}

// FNV-1a over the bytes of a and then b: the hash of their concatenation,
// computed without building it.
uint64_t hash_text(std::string_view a, std::string_view b = {}) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : a) h = (h ^ c) * 0x100000001B3ull;
  for (unsigned char c : b) h = (h ^ c) * 0x100000001B3ull;
  return mix64(h);
}

bool equals_concatenation(std::string_view text, std::string_view a, std::string_view b) {
  return text.size() == a.size() + b.size() && text.compare(0, a.size(), a) == 0 &&
         text.compare(a.size(), b.size(), b) == 0;
}

// Smallest power of two that keeps `entries` at most 3/4 of the slots.
size_t table_capacity(size_t entries) {
  size_t capacity = 16;
  while (capacity / 4 * 3 < entries) capacity *= 2;
  return capacity;
}

// Text -> id. The texts live elsewhere (text_of(id) gives one); a slot keeps
// the upper half of the text's hash beside the id, so that a probe compares
// text only when the hashes agree.
class TextIndex {
 public:
  void reserve(size_t entries) {
    slots_.assign(table_capacity(entries), Slot{0, -1});
    size_ = 0;
  }

  // The id of the text a + b, or -1.
  template <class TextOf>
  int32_t find(std::string_view a, std::string_view b, const TextOf& text_of) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash_text(a, b);
    const uint32_t tag = static_cast<uint32_t>(h >> 32);
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& slot = slots_[i];
      if (slot.id < 0) return -1;
      if (slot.tag == tag && equals_concatenation(text_of(slot.id), a, b)) return slot.id;
    }
  }

  // find() of a[i] + b[i] into ids[i] for i < count (at most kBatch), for
  // loading: the batch's slots, then where their texts are, then the texts,
  // are fetched ahead, so that the memory latencies of its lookups overlap
  // instead of adding up. text_of.prefetch_place(id) and
  // text_of.prefetch_text(id) fetch ahead what text_of(id) will read.
  static constexpr size_t kBatch = 256;
  template <class TextOf>
  void find_batch(size_t count, const std::string_view* a, const std::string_view* b, int32_t* ids,
                  const TextOf& text_of) const {
    uint64_t hashes[kBatch];
    const size_t mask = slots_.size() - 1;
    for (size_t i = 0; i < count; ++i) {
      hashes[i] = hash_text(a[i], b[i]);
      __builtin_prefetch(&slots_[hashes[i] & mask]);
    }
    // The first slot with the same tag is almost always the text's own.
    for (size_t i = 0; i < count; ++i) {
      ids[i] = -1;
      const uint32_t tag = static_cast<uint32_t>(hashes[i] >> 32);
      for (size_t at = hashes[i] & mask; slots_[at].id >= 0; at = (at + 1) & mask) {
        if (slots_[at].tag == tag) {
          ids[i] = slots_[at].id;
          text_of.prefetch_place(ids[i]);
          break;
        }
      }
    }
    for (size_t i = 0; i < count; ++i) {
      if (ids[i] >= 0) text_of.prefetch_text(ids[i]);
    }
    for (size_t i = 0; i < count; ++i) {
      if (ids[i] < 0) continue;
      if (!equals_concatenation(text_of(ids[i]), a[i], b[i])) ids[i] = find(a[i], b[i], text_of);
    }
  }

  // Files `id` under its text unless the text is already there; returns the
  // id the text is filed under (the first one inserted).
  template <class TextOf>
  int32_t insert(int32_t id, const TextOf& text_of) {
    if ((size_ + 1) > slots_.size() / 4 * 3) grow(text_of);
    return insert_hashed(id, hash_text(text_of(id)), text_of);
  }

  // insert() of the ids first .. first + count - 1, with their slots fetched
  // ahead (see find_batch).
  template <class TextOf>
  void insert_range(int32_t first, int32_t count, const TextOf& text_of) {
    uint64_t hashes[kBatch];
    for (int32_t start = 0; start < count; start += static_cast<int32_t>(kBatch)) {
      const int32_t n = std::min(count - start, static_cast<int32_t>(kBatch));
      while ((size_ + static_cast<size_t>(n)) > slots_.size() / 4 * 3) grow(text_of);
      for (int32_t i = 0; i < n; ++i) {
        hashes[i] = hash_text(text_of(first + start + i));
        __builtin_prefetch(&slots_[hashes[i] & (slots_.size() - 1)]);
      }
      for (int32_t i = 0; i < n; ++i) {
        // Empty texts are never looked up (an empty special token would
        // match everywhere).
        if (!text_of(first + start + i).empty()) insert_hashed(first + start + i, hashes[i], text_of);
      }
    }
  }

 private:
  template <class TextOf>
  int32_t insert_hashed(int32_t id, uint64_t h, const TextOf& text_of) {
    const std::string_view text = text_of(id);
    const uint32_t tag = static_cast<uint32_t>(h >> 32);
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& slot = slots_[i];
      if (slot.id < 0) {
        slot = Slot{tag, id};
        ++size_;
        return id;
      }
      if (slot.tag == tag && text_of(slot.id) == text) return slot.id;
    }
  }

  struct Slot {
    uint32_t tag;
    int32_t id;  // -1: empty
  };

  template <class TextOf>
  void grow(const TextOf& text_of) {
    std::vector<Slot> old;
    old.swap(slots_);
    reserve(std::max<size_t>(size_ + 1, old.size()));
    for (const Slot& slot : old) {
      if (slot.id >= 0) insert(slot.id, text_of);
    }
  }

  std::vector<Slot> slots_;
  size_t size_ = 0;
};

// 64-bit key -> two ints, for keys that are not ~0.
class KeyTable {
 public:
  struct Entry {
    uint64_t key;  // kEmpty: a free slot
    int32_t first;
    int32_t second;
  };

  void reserve(size_t entries) {
    slots_.assign(table_capacity(entries), Entry{kEmpty, 0, 0});
    size_ = 0;
  }

  // Keeps the values of the first insertion of a key.
  void insert(uint64_t key, int32_t first, int32_t second) {
    if (size_ + 1 > slots_.size() / 4 * 3) {
      std::vector<Entry> old;
      old.swap(slots_);
      reserve(old.size());
      for (const Entry& entry : old) {
        if (entry.key != kEmpty) insert(entry.key, entry.first, entry.second);
      }
    }
    for (size_t i = mix64(key) & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == key) return;
      if (slots_[i].key == kEmpty) {
        slots_[i] = Entry{key, first, second};
        ++size_;
        return;
      }
    }
  }

  // Fetches ahead the slot where a look-up of `key` starts.
  void prefetch(uint64_t key) const { __builtin_prefetch(&slots_[mix64(key) & (slots_.size() - 1)]); }

  const Entry* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = mix64(key) & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == key) return &slots_[i];
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  std::vector<Entry> slots_;
  size_t size_ = 0;
};

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
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

// The bytes of a token of a vocabulary that writes spaces as U+2581
// (SentencePiece's, Gemma 4's BPE): a normal token's text with its markers
// as spaces, a byte token's byte; control, unknown, unused and undefined
// tokens have no text, as in llama.cpp.
std::string marked_token_bytes(std::string_view text, TokenType type) {
  switch (type) {
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
      return std::string(text);
    case TokenType::kByte: {
      const int byte = parse_byte_token(text);
      return byte < 0 ? std::string(text) : std::string(1, static_cast<char>(byte));
    }
    default:
      return "";
  }
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
    // BOS is added whatever tokenizer.ggml.add_bos_token says (llama.cpp's
    // override for Gemma 4).
    bool force_add_bos = false;
  };

  // A run of input text still to tokenize, or a special token matched in it.
  struct Fragment {
    size_t begin;
    size_t end;
    int32_t token;  // -1 for text
  };

  VocabularyTokenizer() = default;

  void load_common(const GgufFile& file, const Defaults& defaults);

  // The text of a token, or of a text past the vocabulary; no bounds check.
  std::string_view text_of(int32_t id) const {
    const size_t begin = text_offsets_[static_cast<size_t>(id)];
    return std::string_view(text_bytes_.data() + begin, text_offsets_[static_cast<size_t>(id) + 1] - begin);
  }

  // tokens index of an id from the caller; an id outside the vocabulary is
  // the caller's error, reported rather than crashing.
  size_t checked_index(int32_t id) const {
    if (id < 0 || id >= n_vocab()) {
      throw Error(ErrorKind::kInvalidArgument, "token id " + std::to_string(id) +
                                                   " is outside the vocabulary of " +
                                                   std::to_string(n_vocab()) + " tokens");
    }
    return static_cast<size_t>(id);
  }

  // Id of a token text (the first, if several tokens share it), or -1.
  int32_t find_token(std::string_view text) const {
    const int32_t id = index_.find(text, {}, TextOf{this});
    return id < n_vocab() ? id : -1;
  }

  // Id of a text: a token's, or one filed by intern() past the vocabulary;
  // -1 if neither has it.
  int32_t find_text(std::string_view text) const { return index_.find(text, {}, TextOf{this}); }

  // Id of a token the model may produce from plain text, or -1. Control and
  // unknown tokens are never the result of a merge: text can only reach them
  // through the special-token partition, with parse_special. (llama.cpp looks
  // up any token here; no vocabulary we test can tell the difference, since
  // its merges never assemble such a token.)
  int32_t find_text_token(std::string_view text) const { return text_token(find_token(text)); }

  // `id` if the model may produce it from plain text (see find_text_token), else -1.
  int32_t text_token(int32_t id) const {
    if (id < 0 || id >= n_vocab()) return -1;
    const TokenType type = types_[static_cast<size_t>(id)];
    return (type == TokenType::kControl || type == TokenType::kUnknown) ? -1 : id;
  }

  // Cuts the special tokens out of the text, as llama.cpp's
  // tokenizer_st_partition does: longest text first, each matched left to
  // right (without overlaps) in what the longer ones left. User-defined
  // tokens are always matched; control and unknown ones only with
  // parse_special.
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;

  // The ids of the texts a[i] + b[i] (i < count), -1 where there is none; a
  // faster find_token for many texts at once (it may return ids from
  // n_vocab() up, of texts filed by intern()).
  void find_texts(size_t count, const std::string_view* a, const std::string_view* b, int32_t* ids) const {
    for (size_t start = 0; start < count; start += TextIndex::kBatch) {
      index_.find_batch(std::min(TextIndex::kBatch, count - start), a + start, b + start, ids + start, TextOf{this});
    }
  }

  // Files a text past the vocabulary (id n_vocab() and up) unless some
  // token or earlier text has it; returns the id that holds the text a + b.
  int32_t intern(std::string_view a, std::string_view b) {
    const int32_t id = index_.find(a, b, TextOf{this});
    if (id >= 0) return id;
    text_bytes_.append(a).append(b);
    text_offsets_.push_back(text_bytes_.size());
    return index_.insert(static_cast<int32_t>(text_offsets_.size() - 2), TextOf{this});
  }

  int32_t unknown_ = -1;

 private:
  struct TextOf {
    const VocabularyTokenizer* self;
    std::string_view operator()(int32_t id) const { return self->text_of(id); }
    void prefetch_place(int32_t id) const { __builtin_prefetch(&self->text_offsets_[static_cast<size_t>(id)]); }
    void prefetch_text(int32_t id) const {
      __builtin_prefetch(self->text_bytes_.data() + self->text_offsets_[static_cast<size_t>(id)]);
    }
  };

  void build_special_trie();

  TextIndex index_;  // every text in text_bytes_, by its first id
  std::vector<int32_t> special_tokens_;  // longest text first
  std::vector<uint8_t> strip_right_;     // per token: eat the spaces after a match
  // A trie of the special tokens' texts, to find them all in one pass over
  // the text (instead of one search of the whole text per special token:
  // Gemma 3 has 6,400 of them). Node 0 is the root; an edge is
  // (node << 8 | byte) -> child; special_at_[node] is the index in
  // special_tokens_ of the token whose text ends there, or -1.
  KeyTable trie_edges_;
  std::vector<int32_t> special_at_;
  int32_t root_children_[256] = {};
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
  const std::vector<std::string>& tokens = file.require_array(kKeyTokens, GgufType::kString).strings;
  if (tokens.empty()) format_error(std::string("metadata key '") + kKeyTokens + "' is empty");
  if (tokens.size() > static_cast<size_t>(INT32_MAX) / 2) {
    format_error(std::string("metadata key '") + kKeyTokens + "' has too many tokens");
  }
  const size_t n = tokens.size();
  size_t total_bytes = 0;
  for (const std::string& token : tokens) total_bytes += token.size();
  text_bytes_.clear();
  text_bytes_.reserve(total_bytes);
  text_offsets_.assign(1, 0);
  text_offsets_.reserve(n + 1);
  for (const std::string& token : tokens) {
    text_bytes_ += token;
    text_offsets_.push_back(text_bytes_.size());
  }
  n_vocab_ = static_cast<int32_t>(n);

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

  // Duplicate texts: the first id wins (llama.cpp now refuses such a file);
  // empty texts are never looked up (an empty special token would match
  // everywhere).
  index_.reserve(n);
  index_.insert_range(0, static_cast<int32_t>(n), TextOf{this});

  bos_ = read_special_id(file, kKeyBos, defaults.bos, n);
  eos_ = read_special_id(file, kKeyEos, defaults.eos, n);
  unknown_ = read_special_id(file, kKeyUnknown, defaults.unknown, n);
  read_special_id(file, kKeyPadding, -1, n);  // validated only; nothing uses it here
  const int32_t eot = read_special_id(file, kKeyEot, -1, n);
  const int32_t eom = read_special_id(file, kKeyEom, -1, n);

  add_bos_ = file.get_bool(kKeyAddBos, defaults.add_bos);
  add_eos_ = file.get_bool(kKeyAddEos, false);
  if (defaults.force_add_bos && bos_ < 0) {
    format_error(std::string("metadata key '") + kKeyBos + "' is missing or names no token, but this " +
                 "vocabulary always starts a text with BOS (llama.cpp sets '" + kKeyAddBos + "' for it)");
  }
  add_bos_ = add_bos_ || defaults.force_add_bos;
  if (add_bos_ && bos_ < 0) {
    format_error(std::string("metadata key '") + kKeyAddBos + "' is true but '" + kKeyBos +
                 "' names no token");
  }
  if (add_eos_ && eos_ < 0) {
    format_error(std::string("metadata key '") + kKeyAddEos + "' is true but '" + kKeyEos +
                 "' names no token");
  }

  // End of generation and forced control tokens, in llama.cpp's order.
  const auto set_type = [&](int32_t id, TokenType type) { types_[static_cast<size_t>(id)] = type; };
  std::vector<int32_t> eog;
  for (const FimRole& role : fim_roles()) {
    int32_t id = read_special_id(file, role.key, -1, n);
    if (role.deprecated_key != nullptr && file.find(role.deprecated_key) != nullptr) {
      id = read_special_id(file, role.deprecated_key, -1, n);
    }
    if (id < 0) {
      // llama.cpp takes whichever matching token its hash map yields first;
      // the lowest id is the deterministic choice (no known vocabulary has two).
      for (std::string_view text : role.texts) {
        const int32_t found = find_token(text);
        if (found >= 0 && (id < 0 || found < id)) id = found;
      }
      if (id >= 0) set_type(id, TokenType::kControl);
    }
    if (id >= 0 && role.ends_generation) eog.push_back(id);
  }
  for (std::string_view text : kEndOfGenerationTexts) {
    const int32_t id = find_token(text);
    if (id < 0) continue;
    eog.push_back(id);
    set_type(id, TokenType::kControl);
  }
  // gpt-oss's channel markers are always rendered, hence user-defined.
  for (std::string_view text : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    if (const int32_t id = find_token(text); id >= 0) set_type(id, TokenType::kUserDefined);
  }
  for (int32_t id : {eos_, eot, eom}) {
    if (id >= 0) eog.push_back(id);
  }
  const auto eog_with_text = [&](std::string_view text) -> int32_t {
    for (int32_t id : eog) {
      if (text_of(id) == text) return id;
    }
    return -1;
  };
  const auto drop_eog = [&](int32_t id, TokenType type) {
    eog.erase(std::remove(eog.begin(), eog.end(), id), eog.end());
    set_type(id, type);
  };
  // Harmony (gpt-oss) and Solar Open end a message with <|end|> but their
  // turn with <|return|> or <|call|>: there <|end|> is ordinary output.
  const bool has_call = eog_with_text("<|call|>") >= 0 || eog_with_text("<|calls|>") >= 0;
  const int32_t end_id = eog_with_text("<|end|>");
  if (end_id >= 0 && has_call && (eog_with_text("<|return|>") >= 0 || eog_with_text("<|flush|>") >= 0)) {
    drop_eog(end_id, TokenType::kUserDefined);
  }
  // Gemma 4 and PaddleOCR use "</s>" as text, not as an end.
  const int32_t s_id = eog_with_text("</s>");
  if (s_id >= 0 && eog_with_text("<|tool_response>") >= 0) drop_eog(s_id, TokenType::kNormal);

  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  end_of_generation_ = std::move(eog);

  special_tokens_.clear();
  for (size_t i = 0; i < n; ++i) {
    const TokenType t = types_[i];
    if ((t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown) &&
        text_offsets_[i + 1] != text_offsets_[i]) {
      special_tokens_.push_back(static_cast<int32_t>(i));
    }
  }
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(), [&](int32_t a, int32_t b) {
    return text_of(a).size() > text_of(b).size();
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
  build_special_trie();
}

void VocabularyTokenizer::build_special_trie() {
  size_t total = 0;
  for (int32_t id : special_tokens_) total += text_of(id).size();
  trie_edges_.reserve(total);
  special_at_.assign(1, -1);
  std::fill(std::begin(root_children_), std::end(root_children_), -1);
  for (size_t rank = 0; rank < special_tokens_.size(); ++rank) {
    int32_t node = 0;
    for (unsigned char c : text_of(special_tokens_[rank])) {
      const uint64_t edge = (static_cast<uint64_t>(node) << 8) | c;
      const KeyTable::Entry* child = trie_edges_.find(edge);
      if (child != nullptr) {
        node = child->first;
        continue;
      }
      const int32_t next = static_cast<int32_t>(special_at_.size());
      special_at_.push_back(-1);
      trie_edges_.insert(edge, next, 0);
      if (node == 0) root_children_[c] = next;
      node = next;
    }
    // Of tokens with the same text, the first in order takes every match.
    if (special_at_[static_cast<size_t>(node)] < 0) special_at_[static_cast<size_t>(node)] = static_cast<int32_t>(rank);
  }
}

std::vector<VocabularyTokenizer::Fragment> VocabularyTokenizer::partition(std::string_view text,
                                                                           bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;

  // Every occurrence of every special token that may match, in one pass.
  struct Occurrence {
    int32_t rank;  // in special_tokens_
    size_t begin;
  };
  std::vector<Occurrence> found;
  for (size_t begin = 0; begin < text.size(); ++begin) {
    int32_t node = root_children_[static_cast<unsigned char>(text[begin])];
    for (size_t end = begin + 1; node >= 0; ++end) {
      const int32_t rank = special_at_[static_cast<size_t>(node)];
      if (rank >= 0 && (parse_special || types_[static_cast<size_t>(special_tokens_[static_cast<size_t>(rank)])] ==
                                             TokenType::kUserDefined)) {
        found.push_back({rank, begin});
      }
      if (end == text.size()) break;
      const KeyTable::Entry* child =
          trie_edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[end]));
      node = child == nullptr ? -1 : child->first;
    }
  }
  if (found.empty()) {
    fragments.push_back({0, text.size(), -1});
    return fragments;
  }

  // Take them in llama.cpp's order: token by token, longest first; each one's
  // occurrences left to right, an occurrence only if it lies wholly in text
  // no earlier match took and starts after this token's previous match (and
  // the spaces that match ate).
  {
    // By rank, keeping the text order (a counting sort: there may be
    // millions of whitespace-run matches, and ranks are few).
    std::vector<size_t> start(special_tokens_.size() + 1, 0);
    for (const Occurrence& o : found) ++start[static_cast<size_t>(o.rank) + 1];
    for (size_t r = 1; r < start.size(); ++r) start[r] += start[r - 1];
    std::vector<Occurrence> sorted(found.size());
    for (const Occurrence& o : found) sorted[start[static_cast<size_t>(o.rank)]++] = o;
    found.swap(sorted);
  }
  enum : uint8_t { kFree, kToken, kEaten };
  std::vector<uint8_t> taken(text.size(), kFree);
  std::vector<Fragment> matches;
  int32_t rank = -1;
  size_t resume = 0;
  for (const Occurrence& occurrence : found) {
    if (occurrence.rank != rank) {
      rank = occurrence.rank;
      resume = 0;
    }
    const int32_t id = special_tokens_[static_cast<size_t>(rank)];
    const size_t end = occurrence.begin + text_of(id).size();
    if (occurrence.begin < resume ||
        std::find_if(taken.begin() + static_cast<std::ptrdiff_t>(occurrence.begin),
                     taken.begin() + static_cast<std::ptrdiff_t>(end), [](uint8_t t) { return t != kFree; }) !=
            taken.begin() + static_cast<std::ptrdiff_t>(end)) {
      continue;
    }
    std::fill(taken.begin() + static_cast<std::ptrdiff_t>(occurrence.begin),
              taken.begin() + static_cast<std::ptrdiff_t>(end), kToken);
    matches.push_back({occurrence.begin, end, id});
    resume = end;
    if (strip_right_[static_cast<size_t>(id)] != 0) {
      while (resume < text.size() && taken[resume] == kFree && is_c_space(text[resume])) taken[resume++] = kEaten;
    }
  }

  // The matches in text order, with the free runs between them as text.
  std::sort(matches.begin(), matches.end(), [](const Fragment& a, const Fragment& b) { return a.begin < b.begin; });
  size_t pos = 0;
  for (const Fragment& match : matches) {
    while (pos < match.begin && taken[pos] == kEaten) ++pos;
    if (pos < match.begin) fragments.push_back({pos, match.begin, -1});
    fragments.push_back(match);
    pos = match.end;
  }
  while (pos < text.size() && taken[pos] == kEaten) ++pos;
  if (pos < text.size()) fragments.push_back({pos, text.size(), -1});
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
    const size_t n = static_cast<size_t>(n_vocab());
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

    // Which bytes some token has right before a "▁" (see encode_piece).
    for (int32_t id = 0; id < n_vocab(); ++id) {
      if (text_token(id) < 0) continue;
      const std::string_view token = text_of(id);
      for (size_t at = token.find(kSpaceMarker, 1); at != std::string_view::npos;
           at = token.find(kSpaceMarker, at + 1)) {
        joins_before_marker_[static_cast<uint8_t>(token[at - 1])] = true;
      }
    }

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
    Scratch scratch;
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
      encode_piece(piece, &scratch, &ids);
      after_special = false;
    }
    if (add_special && add_eos_) ids.push_back(eos_);
    return ids;
  }

  std::string token_bytes(int32_t id) const override {
    return marked_token_bytes(text_of(static_cast<int32_t>(checked_index(id))), types_[static_cast<size_t>(id)]);
  }

  bool strips_leading_space() const override { return add_space_prefix_; }
  std::string kind() const override { return "llama (SentencePiece BPE)"; }

 private:
  // Buffers one encode() call reuses from piece to piece.
  struct Symbol {
    size_t begin;
    size_t length;  // 0 once merged into its left neighbour
    int prev;
    int next;
  };
  struct Candidate {
    float score;
    int left;
    int right;
    size_t length;  // of the joined text: tells a stale entry apart
  };
  struct Scratch {
    std::vector<Symbol> symbols;
    std::vector<Candidate> queue;  // a heap, highest score then leftmost on top
  };

  // llama.cpp runs the merge loop over the whole text between two special
  // tokens at once, which grows slower than linearly with its length. But a
  // merge joins two neighbours into a token that holds both, so no merge can
  // ever cross a point where the vocabulary has no token holding the bytes
  // on both sides of it. SentencePiece vocabularies have "▁" almost only at
  // the start of a token: before each "▁" that follows a byte no token has
  // before a "▁", the text splits into pieces that merge the same apart as
  // together (the tie-break between equal scores, leftmost first, keeps
  // their order within each piece).
  void encode_piece(std::string_view piece, Scratch* scratch, std::vector<int32_t>* ids) const {
    size_t begin = 0;
    for (size_t at = piece.find(kSpaceMarker, 1); at != std::string_view::npos;
         at = piece.find(kSpaceMarker, at + 1)) {
      if (joins_before_marker_[static_cast<uint8_t>(piece[at - 1])]) continue;
      merge_piece(piece.substr(begin, at - begin), scratch, ids);
      begin = at;
    }
    merge_piece(piece.substr(begin), scratch, ids);
  }

  void merge_piece(std::string_view piece, Scratch* scratch, std::vector<int32_t>* ids) const {
    if (piece.empty()) return;
    std::vector<Symbol>& symbols = scratch->symbols;
    std::vector<Candidate>& queue = scratch->queue;
    symbols.clear();
    queue.clear();
    // Start from characters. A byte that is not valid UTF-8 is a character of
    // its own (llama.cpp sizes characters by the lead byte alone, which lets a
    // bad byte swallow the "▁" after it); for valid text both agree.
    for (size_t offset = 0; offset < piece.size();) {
      uint32_t code_point = 0;
      const size_t length = unicode::decode_utf8(piece, offset, &code_point);
      const int index = static_cast<int>(symbols.size());
      symbols.push_back({offset, length, index - 1, index + 1});
      offset += length;
    }
    symbols.back().next = -1;

    // A pair joins when the vocabulary has the joined text; the higher its
    // score, the sooner, the leftmost first among equals.
    const auto after = [](const Candidate& a, const Candidate& b) {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    const auto try_add = [&](int left, int right) {
      if (left < 0 || right < 0) return;
      const size_t length = symbols[left].length + symbols[right].length;
      const int32_t id = find_text_token(piece.substr(symbols[left].begin, length));
      if (id < 0) return;
      queue.push_back({scores_[static_cast<size_t>(id)], left, right, length});
      std::push_heap(queue.begin(), queue.end(), after);
    };
    for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));

    while (!queue.empty()) {
      std::pop_heap(queue.begin(), queue.end(), after);
      const Candidate candidate = queue.back();
      queue.pop_back();
      Symbol& left = symbols[candidate.left];
      Symbol& right = symbols[candidate.right];
      // Skip a pair whose side was merged away or has grown since it was queued.
      if (left.length == 0 || right.length == 0 || left.length + right.length != candidate.length) continue;
      left.length += right.length;
      right.length = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = candidate.left;
      try_add(left.prev, candidate.left);
      try_add(candidate.left, left.next);
    }

    for (int i = 0; i != -1; i = symbols[i].next) {
      const std::string_view text = piece.substr(symbols[i].begin, symbols[i].length);
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
  bool joins_before_marker_[256] = {};
  int32_t byte_tokens_[256] = {};
};

// ---------------------------------------------------------------------------
// BPE driven by a merge list (tokenizer.ggml.merges), as llama.cpp's
// llm_tokenizer_bpe: adjacent symbols merge by the rank of their pair in the
// list, lowest first, the leftmost on ties.
//
// llama.cpp keys its merges by the pair of texts; here every text a merge
// names gets an id (the token's id, or a further one past the vocabulary for
// the rare text that is no token), so that the merge loop looks pairs of ids
// up and never builds a string.
class MergeTableTokenizer : public VocabularyTokenizer {
 protected:
  // Buffers one encode() call reuses from word to word.
  struct Symbol {
    size_t begin;   // in the word's bytes
    size_t length;  // 0 once merged into its left neighbour
    int32_t id;     // of its text (a token id, or past the vocabulary), -1 if none has it
    int prev;
    int next;
  };
  struct Candidate {
    int32_t rank;
    int left;
    int right;
    int32_t left_id;  // the sides' ids when queued: tell a stale entry apart
    int32_t right_id;
    int32_t joined;
  };
  struct Scratch {
    std::vector<Symbol> symbols;
    std::vector<Candidate> queue;  // a heap, lowest rank then leftmost on top
    std::string encoded;
  };

  MergeTableTokenizer() = default;

  // Reads tokenizer.ggml.merges (after load_common).
  void load_merges(const GgufFile& file) {
    const std::vector<std::string>& lines = file.require_array(kKeyMerges, GgufType::kString).strings;
    merges_.reserve(lines.size());
    // Batches of merges: their texts are looked up together (see find_texts).
    constexpr size_t kMergesPerBatch = 128;
    std::string_view firsts[3 * kMergesPerBatch];
    std::string_view seconds[3 * kMergesPerBatch];
    int32_t ids[3 * kMergesPerBatch];
    int32_t ranks[kMergesPerBatch];
    uint64_t keys[kMergesPerBatch];
    for (size_t start = 0; start < lines.size(); start += kMergesPerBatch) {
      size_t count = 0;
      for (size_t rank = start; rank < std::min(lines.size(), start + kMergesPerBatch); ++rank) {
        const std::string_view line = lines[rank];
        // "left right", split at the first space after the first byte. A
        // line without a separator, or with an empty side, can never match
        // (llama.cpp files it under an empty pair) and is skipped.
        const size_t space = line.size() < 3 ? std::string_view::npos : line.find(' ', 1);
        if (space == std::string_view::npos || space + 1 == line.size()) continue;
        const std::string_view left = line.substr(0, space);
        const std::string_view right = line.substr(space + 1);
        firsts[3 * count] = left;          // the left side
        seconds[3 * count] = {};
        firsts[3 * count + 1] = right;     // the right side
        seconds[3 * count + 1] = {};
        firsts[3 * count + 2] = left;      // the joined text
        seconds[3 * count + 2] = right;
        ranks[count++] = static_cast<int32_t>(rank);
      }
      find_texts(3 * count, firsts, seconds, ids);
      for (size_t i = 0; i < 3 * count; ++i) {
        if (ids[i] < 0) ids[i] = intern(firsts[i], seconds[i]);
      }
      for (size_t m = 0; m < count; ++m) {
        keys[m] = pair_key(ids[3 * m], ids[3 * m + 1]);
        merges_.prefetch(keys[m]);
      }
      // The first occurrence of a pair keeps its rank.
      for (size_t m = 0; m < count; ++m) merges_.insert(keys[m], ranks[m], ids[3 * m + 2]);
    }
  }

  // Merges scratch->symbols (a list from index 0, each with its text's id)
  // until no adjacent pair is in the merge list.
  void merge_symbols(Scratch* scratch) const {
    std::vector<Symbol>& symbols = scratch->symbols;
    std::vector<Candidate>& queue = scratch->queue;
    queue.clear();
    // Lowest rank on top of the heap; the leftmost pair on ties.
    const auto after = [](const Candidate& a, const Candidate& b) {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    };
    const auto try_add = [&](int left, int right) {
      if (left < 0 || right < 0 || symbols[left].id < 0 || symbols[right].id < 0) return;
      const KeyTable::Entry* merge = merges_.find(pair_key(symbols[left].id, symbols[right].id));
      if (merge == nullptr) return;
      queue.push_back({merge->first, left, right, symbols[left].id, symbols[right].id, merge->second});
      std::push_heap(queue.begin(), queue.end(), after);
    };
    for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));

    while (!queue.empty()) {
      std::pop_heap(queue.begin(), queue.end(), after);
      const Candidate candidate = queue.back();
      queue.pop_back();
      Symbol& left = symbols[candidate.left];
      Symbol& right = symbols[candidate.right];
      // A side merged away, or grown (and so of another text), since the
      // pair was queued: the entry is stale. While both sides keep their
      // texts they are still neighbours.
      if (left.length == 0 || right.length == 0 || left.id != candidate.left_id ||
          right.id != candidate.right_id) {
        continue;
      }
      left.length += right.length;
      left.id = candidate.joined;
      right.length = 0;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = candidate.left;
      try_add(left.prev, candidate.left);
      try_add(candidate.left, left.next);
    }
  }

  KeyTable merges_;  // pair_key(left id, right id) -> rank, id of the joined text
};

// ---------------------------------------------------------------------------
// Byte-level BPE (tokenizer.ggml.model = "gpt2"): split with the
// pre-tokenizer, write each piece's bytes in GPT-2's printable alphabet, then
// merge.
class ByteLevelBpeTokenizer final : public MergeTableTokenizer {
 public:
  explicit ByteLevelBpeTokenizer(const GgufFile& file) {
    pre_name_ = file.get_string(kKeyPre, "");
    configure_pre_tokenizer(pre_name_);
    load_common(file, Defaults{/*bos=*/-1, /*eos=*/-1, /*unknown=*/-1, /*add_bos=*/default_add_bos_});

    // Each byte starts out as the symbol of its alphabet code point.
    for (int b = 0; b < 256; ++b) {
      std::string symbol;
      unicode::append_utf8(unicode::byte_to_code_point(static_cast<uint8_t>(b)), &symbol);
      byte_symbols_[b] = intern(symbol, {});
    }
    load_merges(file);
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override {
    std::vector<int32_t> ids;
    if (add_special && add_bos_) ids.push_back(bos_);
    Scratch scratch;
    for (const Fragment& fragment : partition(text, parse_special)) {
      if (fragment.token >= 0) {
        ids.push_back(fragment.token);
        continue;
      }
      const std::string_view raw = text.substr(fragment.begin, fragment.end - fragment.begin);
      for (std::string_view word : unicode::pre_tokenize(pre_tokenizer_, raw)) encode_word(word, &scratch, &ids);
    }
    if (add_special && add_eos_) ids.push_back(eos_);
    return ids;
  }

  std::string token_bytes(int32_t id) const override {
    const std::string_view text = text_of(static_cast<int32_t>(checked_index(id)));
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
            out.append(text.substr(pos, length));
          }
          pos += length;
        }
        return out;
      }
      case TokenType::kUserDefined:
        return std::string(text);
      case TokenType::kByte: {
        const int byte = parse_byte_token(text);
        return byte < 0 ? std::string(text) : std::string(1, static_cast<char>(byte));
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
        {"lfm2", PreTokenizer::kLlama3},  // LiquidAI's LFM2 and LFM2.5
        {"dbrx", PreTokenizer::kLlama3},
        {"smaug-bpe", PreTokenizer::kLlama3},
        {"qwen2", PreTokenizer::kQwen2},
        {"deepseek-r1-qwen", PreTokenizer::kQwen2},
        {"stablelm2", PreTokenizer::kQwen2},
        {"megrez", PreTokenizer::kQwen2},
        {"qwen35", PreTokenizer::kQwen35},  // Qwen3.5 (and 3.6)
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
                                   pre == "falcon3" || pre == "pixtral" || pre == "lfm2";
        ignore_merges_ = llama3_family;
        default_add_bos_ = llama3_family;
        return;
      }
    }
    unsupported_error(std::string("metadata key '") + kKeyPre + "' = '" + pre +
                      "': unsupported pre-tokenizer");
  }

  // Appends the tokens of one pre-tokenizer piece (raw bytes).
  void encode_word(std::string_view word, Scratch* scratch, std::vector<int32_t>* ids) const {
    if (word.empty()) return;
    if (ignore_merges_) {
      scratch->encoded.clear();
      for (char c : word) unicode::append_utf8(unicode::byte_to_code_point(static_cast<uint8_t>(c)), &scratch->encoded);
      const int32_t id = find_text_token(scratch->encoded);
      if (id >= 0) {
        ids->push_back(id);
        return;
      }
    }

    std::vector<Symbol>& symbols = scratch->symbols;
    symbols.clear();
    for (size_t i = 0; i < word.size(); ++i) {
      const int index = static_cast<int>(i);
      symbols.push_back({i, 1, byte_symbols_[static_cast<uint8_t>(word[i])], index - 1, index + 1});
    }
    symbols.back().next = -1;
    merge_symbols(scratch);

    for (int i = 0; i != -1; i = symbols[i].next) {
      const Symbol& symbol = symbols[i];
      const int32_t id = text_token(symbol.id);
      if (id >= 0) {
        ids->push_back(id);
        continue;
      }
      // A merge result missing from the vocabulary: fall back to its
      // characters, one per byte (llama.cpp looks up its single bytes, which
      // for a byte-level vocabulary only ever finds ASCII ones), else the
      // unknown token.
      for (size_t b = symbol.begin; b < symbol.begin + symbol.length; ++b) {
        const int32_t char_id = text_token(byte_symbols_[static_cast<uint8_t>(word[b])]);
        if (char_id >= 0) {
          ids->push_back(char_id);
        } else if (unknown_ >= 0) {
          ids->push_back(unknown_);
        }
      }
    }
  }

  std::string pre_name_;
  unicode::PreTokenizer pre_tokenizer_ = unicode::PreTokenizer::kDefault;
  bool ignore_merges_ = false;
  bool default_add_bos_ = false;
  int32_t byte_symbols_[256] = {};
};

// ---------------------------------------------------------------------------
// BPE over UTF-8 with SentencePiece's spaces (tokenizer.ggml.model =
// "gemma4"; also "gpt2" with the pre-tokenizer "gemma4" or
// "granite-embed-multi-311m"), as llama.cpp runs its LLAMA_VOCAB_PRE_TYPE_GEMMA4:
// Hugging Face's conversion of a SentencePiece model into a BPE. Tokens are
// UTF-8 text with U+2581 for a space and <0xXX> byte-fallback tokens:
//   - every space of the text becomes U+2581 (no space is added in front);
//   - the text splits into runs of newlines and runs of everything else; a
//     run of newlines that is a token as a whole is that token;
//   - each run starts out as its UTF-8 characters, which merge by the rank of
//     their pair in tokenizer.ggml.merges (lowest first, leftmost on ties);
//   - a piece that is no token falls back to the <0xXX> tokens of its bytes.
// BOS is always added (llama.cpp overrides tokenizer.ggml.add_bos_token to
// true for it). Decoding writes U+2581 as a space and keeps a leading space
// unless tokenizer.ggml.add_space_prefix says otherwise.
class SpaceMarkerBpeTokenizer final : public MergeTableTokenizer {
 public:
  // `model` is tokenizer.ggml.model: "gemma4", or "gpt2" (whose default BOS
  // and EOS, 11, llama.cpp keeps for it when the file names none).
  SpaceMarkerBpeTokenizer(const GgufFile& file, const std::string& model) : model_(model) {
    if (model_ == "gpt2") pre_name_ = file.get_string(kKeyPre, "");
    const int32_t default_special = model_ == "gpt2" ? 11 : -1;
    Defaults defaults{/*bos=*/default_special, /*eos=*/default_special, /*unknown=*/-1, /*add_bos=*/true};
    defaults.force_add_bos = true;
    load_common(file, defaults);
    add_space_prefix_ = file.get_bool(kKeyAddSpacePrefix, false);
    load_merges(file);

    // llama.cpp's byte fallback: the "<0xXX>" token of each byte.
    static const char kHex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) {
      const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      byte_tokens_[static_cast<size_t>(b)] = find_token(std::string_view(name, sizeof(name)));
    }
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override {
    std::vector<int32_t> ids;
    if (add_special && add_bos_) ids.push_back(bos_);
    Scratch scratch;
    std::string escaped;
    for (const Fragment& fragment : partition(text, parse_special)) {
      if (fragment.token >= 0) {
        ids.push_back(fragment.token);
        continue;
      }
      escaped.clear();
      for (char c : text.substr(fragment.begin, fragment.end - fragment.begin)) {
        if (c == ' ') {
          escaped += kSpaceMarker;
        } else {
          escaped += c;
        }
      }
      // llama.cpp's split for this model: "[^\n]+|[\n]+".
      for (size_t begin = 0; begin < escaped.size();) {
        const bool newlines = escaped[begin] == '\n';
        size_t end = begin + 1;
        while (end < escaped.size() && (escaped[end] == '\n') == newlines) ++end;
        encode_word(std::string_view(escaped).substr(begin, end - begin), newlines, &scratch, &ids);
        begin = end;
      }
    }
    if (add_special && add_eos_) ids.push_back(eos_);
    return ids;
  }

  std::string token_bytes(int32_t id) const override {
    return marked_token_bytes(text_of(static_cast<int32_t>(checked_index(id))), types_[static_cast<size_t>(id)]);
  }

  bool strips_leading_space() const override { return add_space_prefix_; }

  std::string kind() const override {
    std::string kind = model_ + " (BPE over UTF-8, spaces as U+2581";
    if (model_ == "gpt2") kind += ", pre-tokenizer " + pre_name_;
    return kind + ")";
  }

 private:
  // Appends the tokens of one run of newlines or of other characters.
  void encode_word(std::string_view word, bool newlines, Scratch* scratch, std::vector<int32_t>* ids) const {
    if (newlines) {
      // llama.cpp's fix for Gemma 4 (its PR 21343): a run of newlines that
      // is a token is taken whole, whatever the merges would make of it.
      const int32_t id = find_text_token(word);
      if (id >= 0) {
        ids->push_back(id);
        return;
      }
    }
    // UTF-8 characters. A byte that is not valid UTF-8 is a symbol of its
    // own, which no merge joins and which falls back to its byte token
    // (llama.cpp reads it as U+FFFD, which this code does not, so that
    // decoding gives the text back).
    std::vector<Symbol>& symbols = scratch->symbols;
    symbols.clear();
    for (size_t offset = 0; offset < word.size();) {
      uint32_t code_point = 0;
      const size_t length = unicode::decode_utf8(word, offset, &code_point);
      const int index = static_cast<int>(symbols.size());
      symbols.push_back({offset, length, find_text(word.substr(offset, length)), index - 1, index + 1});
      offset += length;
    }
    symbols.back().next = -1;
    merge_symbols(scratch);

    for (int i = 0; i != -1; i = symbols[i].next) {
      const Symbol& symbol = symbols[i];
      const int32_t id = text_token(symbol.id);
      if (id >= 0) {
        ids->push_back(id);
        continue;
      }
      // Byte fallback. Where a vocabulary has no token for a byte, llama.cpp
      // drops the byte; this code gives the unknown token, if there is one,
      // as it does for the other models.
      for (size_t b = symbol.begin; b < symbol.begin + symbol.length; ++b) {
        const int32_t byte_id = byte_tokens_[static_cast<uint8_t>(word[b])];
        if (byte_id >= 0) {
          ids->push_back(byte_id);
        } else if (unknown_ >= 0) {
          ids->push_back(unknown_);
        }
      }
    }
  }

  std::string model_;
  std::string pre_name_;
  bool add_space_prefix_ = false;
  int32_t byte_tokens_[256] = {};
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
  // Gemma 4 (llama.cpp ignores tokenizer.ggml.pre here, and so does this).
  if (model == "gemma4") return std::make_unique<SpaceMarkerBpeTokenizer>(file, model);
  if (model == "gpt2") {
    // Two pre-tokenizer names llama.cpp runs as Gemma 4's BPE (its
    // converter gives the second to Gemma 3's tokenizer.json, for one).
    const std::string pre = file.get_string(kKeyPre, "");
    if (pre == "gemma4" || pre == "granite-embed-multi-311m") {
      return std::make_unique<SpaceMarkerBpeTokenizer>(file, model);
    }
    return std::make_unique<ByteLevelBpeTokenizer>(file);
  }
  unsupported_error(std::string("metadata key '") + kKeyModel + "' = '" + model +
                    "': unsupported tokenizer model (supported: llama, gpt2, gemma4)");
}

std::string_view Tokenizer::token_text(int32_t id) const {
  if (id < 0 || id >= n_vocab()) {
    throw Error(ErrorKind::kInvalidArgument, "token id " + std::to_string(id) + " is outside the vocabulary of " +
                                                 std::to_string(n_vocab()) + " tokens");
  }
  const size_t begin = text_offsets_[static_cast<size_t>(id)];
  return std::string_view(text_bytes_.data() + begin, text_offsets_[static_cast<size_t>(id) + 1] - begin);
}

TokenType Tokenizer::token_type(int32_t id) const {
  token_text(id);  // the range check
  return types_[static_cast<size_t>(id)];
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
