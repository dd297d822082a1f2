// Unicode helpers for the tokenizers: UTF-8 decoding and encoding, code point
// categories, the GPT-2 byte-level alphabet, and the pre-tokenizer splits of
// byte-level BPE vocabularies.
//
// The pre-tokenizers reproduce the regex lists llama.cpp uses per
// tokenizer.ggml.pre (src/llama-vocab.cpp, src/unicode.cpp), written by hand:
// std::regex is slow, knows no \p{..} classes, and its backtracking can blow up
// on long inputs. Every splitter here runs in time linear in the text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sipllm::unicode {

constexpr uint32_t kReplacementCharacter = 0xFFFD;
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Major class of the Unicode general category (L, M, N, P, S, Z, C), plus
// kUndefined for unassigned code points. Values are those of the generated
// table (scripts/gen_unicode_tables.py).
enum class Category : uint8_t {
  kUndefined = 0,
  kLetter = 1,
  kMark = 2,
  kNumber = 3,
  kPunctuation = 4,
  kSymbol = 5,
  kSeparator = 6,
  kControl = 7,
};

Category category(uint32_t code_point);
// The Unicode White_Space property (what the regexes' \s means).
bool is_whitespace(uint32_t code_point);
inline bool is_letter(uint32_t cp) { return category(cp) == Category::kLetter; }
inline bool is_number(uint32_t cp) { return category(cp) == Category::kNumber; }
inline bool is_punctuation(uint32_t cp) { return category(cp) == Category::kPunctuation; }

// Length of the UTF-8 sequence announced by `lead`, judged from its high four
// bits only (as llama.cpp's unicode_len_utf8): 1 for ASCII and for a stray
// continuation byte, 2 for 0xC0-0xDF, 3 for 0xE0-0xEF, 4 for 0xF0-0xFF.
size_t utf8_sequence_length(uint8_t lead);

// Decodes the character starting at text[pos] (pos < text.size()) into
// *code_point and returns its length in bytes (at least 1). A byte that does
// not start a well-formed sequence (bad lead byte, missing continuation bytes,
// an overlong form, a surrogate, a value above U+10FFFF) is returned alone,
// with length 1 and U+FFFD, so a caller always advances and never loops.
size_t decode_utf8(std::string_view text, size_t pos, uint32_t* code_point);

// Appends the UTF-8 encoding of code_point (U+FFFD if above U+10FFFF).
void append_utf8(uint32_t code_point, std::string* out);

// How many bytes at the end of `bytes` are the start of a UTF-8 sequence that
// is still missing continuation bytes (0 if the text ends on a complete
// character or on bytes that can never become one).
size_t incomplete_utf8_tail(std::string_view bytes);

// GPT-2's byte-level alphabet: every byte maps to a printable code point
// (printable Latin-1 bytes to themselves, the rest to U+0100 and up).
uint32_t byte_to_code_point(uint8_t byte);
// The byte a code point of that alphabet stands for, or -1 if it is not one.
int code_point_to_byte(uint32_t code_point);
// Maps each byte of `bytes` to its alphabet code point, as UTF-8.
std::string byte_level_encode(std::string_view bytes);

// The pre-tokenizer regex lists of llama.cpp's byte-level BPE vocabularies.
enum class PreTokenizer {
  kDefault,        // llama.cpp's list for a missing or "default" tokenizer.ggml.pre
  kGpt2,           // gpt-2, mpt, olmo, ...
  kLlama3,         // llama3, llama-bpe, dbrx, smaug-bpe, ...
  kQwen2,          // qwen2, deepseek-r1-qwen, stablelm2, ...
  kQwen35,         // qwen35: Qwen2's, with combining marks (\p{M}) joining the letter runs
  kStarcoder,      // starcoder, refact, command-r, smollm, ...
  kFalcon,
  kDeepseekCoder,
  kDeepseekLlm,
};

// Splits `text` into pre-tokenizer pieces, in order, covering all of it. Each
// regex of the list splits the pieces the previous one produced; both the
// spans it matches and the spans between matches become pieces.
std::vector<std::string_view> pre_tokenize(PreTokenizer kind, std::string_view text);

}  // namespace sipllm::unicode
