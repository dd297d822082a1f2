// GBNF grammars (llama.cpp's format) and a matcher that runs them over bytes.
//
//   root  ::= "{" ws pair ("," ws pair)* "}"
//   pair  ::= [a-z]+ ":" ws [0-9]{1,3}
//   ws    ::= [ \t\n]*     # a comment
//
// Rules, alternatives (|), sequences, groups, repetition (* + ? {m} {m,}
// {m,n}), string literals, character classes with ranges and negation
// ([^...]), any character (.), the escapes \x.. \u.... \U........ \t \r \n
// \\ \" \[ \] \-, comments, and UTF-8 in literals and classes. Names are
// letters, digits, '-' and '_'. A newline ends a rule, except inside
// parentheses and after '|'. The grammar starts at the rule `root`.
//
// The grammar works on Unicode code points; the matcher decodes UTF-8 as
// bytes arrive, so a token may end inside a character (byte-level BPE
// tokens do) and invalid UTF-8 is never accepted.
//
// Refused, with an error naming the line and column: syntax errors,
// undefined rules, rules defined twice, a missing `root`, left recursion
// (a rule that can reach itself before matching a character, which a
// left-to-right matcher cannot run, as llama.cpp refuses it), unbounded
// repetition of something that can match nothing, and repetition counts
// above kMaxRepetition. llama.cpp's token references (<[id]>, <name>) are
// refused too: the grammar describes text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sipllm {

class Grammar {
 public:
  // Repetition counts are kept as counters (not unrolled into rules as
  // llama.cpp does), so large ones cost nothing; the limit only keeps a
  // typo such as {0,99999999999} from meaning "forever".
  static constexpr uint32_t kMaxRepetition = 1000000;

  // Throws Error(kInvalidArgument) "grammar line L, column C: ..." naming
  // what was expected, or the rule at fault.
  static std::shared_ptr<const Grammar> parse(std::string_view text);

  // A set of code points, as sorted, disjoint, non-adjacent ranges.
  struct CharSet {
    std::vector<uint32_t> lo, hi;  // inclusive
    uint64_t ascii[2] = {0, 0};    // membership of 0..127, for speed
    bool contains(uint32_t cp) const;
    bool intersects(uint32_t first, uint32_t last) const;
    bool covers(uint32_t first, uint32_t last) const;
  };

  enum class ItemKind : uint8_t {
    kChars,   // one code point of charsets[value]
    kRule,    // rules[value]
    kRepeat,  // rules[value], min..max times (max kUnbounded: no limit)
    kEnd,     // end of an alternative
  };
  static constexpr uint32_t kUnbounded = UINT32_MAX;
  struct Item {
    ItemKind kind = ItemKind::kEnd;
    uint32_t value = 0;
    uint32_t min = 0, max = 0;
    bool nullable_body = false;  // kRepeat: the body can match nothing
  };
  struct Rule {
    std::string name;                   // groups get "<rule>_<n>"
    std::vector<uint32_t> alternatives;  // index of each alternative's first item
  };

  const std::vector<Item>& items() const { return items_; }
  const std::vector<Rule>& rules() const { return rules_; }
  const std::vector<CharSet>& charsets() const { return charsets_; }
  // An item referring to `root`, followed by kEnd: where matching starts.
  uint32_t start_item() const { return start_item_; }

 private:
  friend class GrammarParser;
  std::vector<Item> items_;
  std::vector<Rule> rules_;
  std::vector<CharSet> charsets_;
  uint32_t start_item_ = 0;
};

// Runs a grammar over bytes as a pushdown automaton whose configurations
// (sets of parse stacks) are numbered states, discovered lazily and cached
// with their byte transitions: the same prefix from the same state is
// worked out once, so checking many tokens from one state (a whole
// vocabulary through a trie) costs a table lookup per byte.
//
// Not thread-safe; one matcher per generation.
class GrammarMatcher {
 public:
  using StateId = int32_t;
  static constexpr StateId kDead = -1;

  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);

  StateId state() const { return current_; }

  // The state after `byte` from `state`, kDead if the grammar rejects it.
  StateId step(StateId state, uint8_t byte) {
    const int32_t row = rows_[static_cast<size_t>(state)];
    if (row >= 0) {
      const int32_t next = transitions_[static_cast<size_t>(row) * 256 + byte];
      if (next != kUnknown) return next;
    }
    return compute_step(state, byte);
  }
  // The state after all of `bytes` (kDead if any is rejected).
  StateId walk(StateId state, std::string_view bytes);

  // Moves the current state over `bytes`; false (and no move) if rejected.
  bool accept(std::string_view bytes);

  // The bytes so far form a complete sentence of the grammar.
  bool can_end(StateId state) const { return states_[static_cast<size_t>(state)].can_end; }
  // ... and nothing can follow them.
  bool must_end(StateId state) const { return states_[static_cast<size_t>(state)].must_end; }

  // Whether `text` (from the start) is a complete sentence. For tests and
  // tools; leaves the current state alone.
  bool matches(std::string_view text);
  // Whether `text` could begin a sentence.
  bool is_prefix(std::string_view text);

  // The caches grow with every new state; past a limit this forgets every
  // state but the current one (which becomes state 0 again). State ids held
  // elsewhere are then stale: epoch() counts these resets.
  void trim_if_large();
  uint64_t epoch() const { return epoch_; }
  size_t state_count() const { return states_.size(); }

  // Bounds on the work one state may take: more parses alive at once than
  // this means the grammar is ambiguous beyond use (x? x? x? ... written
  // out hundreds of times), and is reported rather than run slowly.
  static constexpr size_t kMaxStacks = 20000;
  // Stack frames handled so far, for callers that bound a whole walk.
  uint64_t work() const { return work_; }
  static constexpr size_t kTrimStates = 8192;

 private:
  static constexpr int32_t kUnknown = -2;

  struct Node {  // one stack frame; a stack is its top frame
    uint32_t item, aux, parent;
  };
  struct State {
    uint32_t first, count;  // its stacks: stack_pool_[first, first + count)
    bool can_end = false, must_end = false;
  };
  struct NodeKeyHash {
    size_t operator()(const Node& n) const;
  };
  struct NodeKeyEq {
    bool operator()(const Node& a, const Node& b) const {
      return a.item == b.item && a.aux == b.aux && a.parent == b.parent;
    }
  };
  struct StacksHash {
    size_t operator()(const std::vector<uint32_t>& v) const;
  };

  uint32_t intern(uint32_t item, uint32_t aux, uint32_t parent);
  uint32_t continuation(uint32_t parent, uint32_t item);
  void expand(uint32_t node, std::vector<uint32_t>& out);
  StateId intern_state(std::vector<uint32_t>& stacks);
  StateId compute_step(StateId state, uint8_t byte);
  void reset_caches(const std::vector<std::vector<Node>>* keep);  // null: start afresh
  StateId initial_state();
  void begin_expansion();  // clears the scratch of one expansion

  std::shared_ptr<const Grammar> grammar_;
  std::vector<Node> nodes_;  // 0 is the empty stack
  std::unordered_map<Node, uint32_t, NodeKeyHash, NodeKeyEq> node_ids_;
  std::vector<State> states_;
  std::vector<uint32_t> stack_pool_;
  std::unordered_map<std::vector<uint32_t>, StateId, StacksHash> state_ids_;
  // Transition rows, 256 each, for the states stepped from (a walk ends in
  // many states that are never left): rows_[state] indexes them, or is -1.
  std::vector<int32_t> rows_;
  std::vector<int32_t> transitions_;
  StateId current_ = 0;
  StateId start_ = 0;
  uint64_t epoch_ = 0;
  uint64_t work_ = 0;

  // Scratch of compute_step/expand, kept to avoid allocations.
  std::vector<uint32_t> todo_, out_;
  std::vector<uint32_t> seen_;  // per node: the stamp of the last step that expanded it
  uint32_t stamp_ = 0;
  std::unordered_map<uint64_t, uint32_t> repeat_min_;  // (parent, item) -> least count expanded
};

}  // namespace sipllm
