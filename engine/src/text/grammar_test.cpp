// GBNF grammars: what parses, what is refused (and where), and which texts
// the matcher accepts.
#include "text/grammar.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sipllm/error.h"
#include "sipllm/grammar.h"

namespace sipllm {
namespace {

// A JSON grammar written in the style of llama.cpp's grammars/json.gbnf.
const char* const kJsonGrammar = R"(# any JSON value
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: limited to one newline and 20 blanks
ws ::= | " " | "\n" [ \t]{0,20}
)";

bool matches(const std::string& grammar, const std::string& text) {
  GrammarMatcher matcher(Grammar::parse(grammar));
  return matcher.matches(text);
}

TEST(Grammar, ValidGrammarsParse) {
  const std::vector<std::string> grammars = {
      kJsonGrammar,
      "root ::= \"a\"",
      "root ::= \"\"",
      "root ::=",                            // the empty sentence only
      "root ::= [a-z]+ (\",\" [a-z]+)*\n",  // trailing newline
      "root ::= x\r\nx ::= \"y\"\r\n",       // CRLF line ends
      "root ::= a | b |\n  c\na ::= \"a\"\nb ::= \"b\"\nc ::= \"c\"",  // newline after |
      "root ::= (\n  \"a\" # a comment inside a group\n  | \"b\"\n)",
      "  # leading comment\n\nroot ::= UPPER-case_name2\nUPPER-case_name2 ::= [^\\n]",
      "root ::= [\\x00-\\x1F\\u00e9\\U0001F600\\[\\]\\-\\\\\\\"] .",
      "root ::= \"a\"{3} \"b\"{2,} \"c\"{0,4} \"d\"{ 1 , 2 }",
      "root ::= \"x\"*?",  // repetition of a repetition
      "root ::= ([a] [b]?)*",
      "root ::= [ぁ-ゟ]+ \"。\"",
      "root ::= \"(\" root \")\" | \"\"",  // right recursion is fine
      "root ::= a\na ::= \"x\" a | \"y\"",
      "root ::= \"[\" ws \"]\"\nws ::= ([ \\t\\n] ws)?",  // the older JSON grammars' blanks
      "root ::= (\"a\"?){0,5}",  // a bounded repetition of something optional
      "root ::= [a-]",           // '-' before ']' is itself
      "root ::= []",             // matches nothing, but is a grammar
  };
  for (const std::string& g : grammars) {
    EXPECT_NO_THROW(Grammar::parse(g)) << g;
    EXPECT_NO_THROW(check_grammar(g)) << g;
  }
}

struct BadGrammar {
  std::string grammar;
  std::string message;  // a part of the error
};

TEST(Grammar, ErrorsNameLineColumnAndWhat) {
  const std::vector<BadGrammar> cases = {
      {"root ::= \"a", "line 1, column 10: unterminated string literal"},
      {"root := \"a\"", "line 1, column 6: expected '::=' after the rule name 'root', found ':'"},
      {"root ::= foo", "line 1, column 10: undefined rule 'foo'"},
      {"root ::= [a-", "line 1, column 10: unterminated character class"},
      {"root ::= \"a\" )", "line 1, column 14: expected an item, '|' or the end of the line in rule 'root', found ')'"},
      {"root ::= ( \"a\"", "line 1, column 15: expected ')' to close the group opened at line 1, column 10"},
      {"root ::= \"\\q\"", "line 1, column 11: unknown escape \\q"},
      {"root ::= \"\\x4\"", "line 1, column 14: expected 2 hex digits after \\x, found '\"'"},
      {"root ::= \"\\U00110000\"", "code point above U+10FFFF"},
      {"root ::= *", "line 1, column 10: '*' must follow an item to repeat"},
      {"root ::= \"\"+", "'+' must follow an item to repeat"},
      {"root ::= \"a\"{3,1}", "line 1, column 13: repetition {3,1}: the maximum is below the minimum"},
      {"root ::= \"a\"{,3}", "line 1, column 14: expected a repetition count after '{', found ','"},
      {"root ::= \"a\"{2000000}", "repetition count above the limit of 1000000"},
      {"root ::= \"a\"{99999999999999999999999}", "repetition count above the limit"},
      {"root ::= \"a\"{2 3}", "expected ',' or '}' in the repetition count, found '3'"},
      {"a ::= \"x\"", "grammar: no rule named 'root'"},
      {"", "no rule named 'root'"},
      {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice (first on line 1)"},
      {"root ::= <[12]>", "token references"},
      {"root ::= !<x>", "token references"},
      {"root ::= [z-a]", "line 1, column 11: character range with its end before its start"},
      {"root ::= \"ok\"\n\nitem ::= \"x\" ]", "line 3, column 14: expected an item"},
      {"root ::= 9 ::= x", "expected an item, '|' or the end of the line"},
      {"root ::= \"a\" \xff", "line 1, column 14: expected an item, '|' or the end of the line in rule 'root', found a byte that is not UTF-8"},
      {"root ::= \"\xc3\"", "line 1, column 11: invalid UTF-8 in the grammar"},
      {"::= \"a\"", "line 1, column 1: expected a rule name, found ':'"},
      // Left recursion, directly, through other rules, and past items that
      // can be empty: llama.cpp refuses these too.
      {"root ::= root \"a\" | \"b\"", "line 1, column 1: left recursion: rule 'root' can reach itself"},
      {"root ::= expr\nexpr ::= term \"+\" | \"x\"\nterm ::= expr \"*\"",
       "left recursion: rule 'expr' can reach itself before reading a character (expr -> term -> expr)"},
      {"root ::= maybe root \"x\" | \"y\"\nmaybe ::= \"m\"?", "left recursion: rule 'root'"},
      {"root ::= (\"a\" | root)", "left recursion"},
      {"root ::= (\"a\"?)*", "the repeated item can match the empty string"},
      {"root ::= x+\nx ::= \"a\" | ", "the repeated item can match the empty string"},
  };
  for (const BadGrammar& c : cases) {
    try {
      Grammar::parse(c.grammar);
      ADD_FAILURE() << "accepted: " << c.grammar;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos)
          << "grammar: " << c.grammar << "\nerror:   " << e.what() << "\nwanted:  " << c.message;
    }
  }
}

TEST(Grammar, DeepNestingIsRefusedNotOverflowed) {
  std::string deep = "root ::= " + std::string(100, '(') + "\"a\"" + std::string(100, ')');
  EXPECT_THROW(Grammar::parse(deep), Error);
  std::string fine = "root ::= " + std::string(40, '(') + "\"a\"" + std::string(40, ')');
  EXPECT_TRUE(matches(fine, "a"));
}

struct Case {
  std::string grammar;
  std::string text;
  bool accepted;
};

TEST(GrammarMatcher, AcceptsAndRejects) {
  const std::vector<Case> cases = {
      {"root ::= \"abc\"", "abc", true},
      {"root ::= \"abc\"", "ab", false},
      {"root ::= \"abc\"", "abcd", false},
      {"root ::= \"a\" | \"b\" \"c\"", "bc", true},
      {"root ::= \"a\" | \"b\" \"c\"", "ac", false},
      {"root ::= (\"x\" | \"y\") \"z\"", "yz", true},
      {"root ::= \"a\" |", "", true},
      {"root ::=", "", true},
      {"root ::=", "a", false},
      {"root ::= []", "a", false},
      // Repetition bounds.
      {"root ::= \"a\"{2,4}", "a", false},
      {"root ::= \"a\"{2,4}", "aa", true},
      {"root ::= \"a\"{2,4}", "aaaa", true},
      {"root ::= \"a\"{2,4}", "aaaaa", false},
      {"root ::= \"a\"{3}", "aaa", true},
      {"root ::= \"a\"{3}", "aaaa", false},
      {"root ::= \"a\"{2,}", "a", false},
      {"root ::= \"a\"{2,}", "aaaaaaaaaaaaaaaaaaaa", true},
      {"root ::= \"a\"{0}", "", true},
      {"root ::= \"a\"{0}", "a", false},
      {"root ::= \"ab\"?", "", true},
      {"root ::= \"ab\"?", "abab", false},
      {"root ::= \"ab\"*", "ababab", true},
      {"root ::= \"ab\"*", "aba", false},
      {"root ::= \"ab\"+", "", false},
      {"root ::= (\"ab\"{1,2}){2}", "ababab", true},
      {"root ::= (\"ab\"{1,2}){2}", "ab", false},
      {"root ::= (\"ab\"{1,2}){2}", "abababababab", false},
      {"root ::= (\"a\"?){0,5} \"b\"", "aaaaab", true},
      {"root ::= (\"a\"?){0,5} \"b\"", "aaaaaab", false},
      {"root ::= (\"a\"?){3,5} \"b\"", "b", true},  // three empty iterations
      {"root ::= \"x\"*?", "xxx", true},
      {"root ::= [a-c]{2} [0-9]", "cb7", true},
      // Character classes.
      {"root ::= [^a-c]", "d", true},
      {"root ::= [^a-c]", "b", false},
      {"root ::= [^a-c]", "\xC3\xA9", true},  // é is not in a-c
      {"root ::= [a-]+", "a-a", true},
      {"root ::= [\\]\\-\\[]+", "]-[", true},
      {"root ::= .", "\xF0\x9F\x98\x80", true},  // one character, four bytes
      {"root ::= .", "ab", false},
      {"root ::= [\\x00-\\x1F]", std::string(1, '\x1F'), true},
      {"root ::= [\\x00-\\x1F]", std::string(1, '\0'), true},
      // Escapes in literals.
      {"root ::= \"\\x41\\u00e9\\U0001F600\\t\\n\\\\\\\"\"", "A\xC3\xA9\xF0\x9F\x98\x80\t\n\\\"", true},
      // UTF-8 in the grammar and in the text.
      {"root ::= [ぁ-ゟ]+ \"。\"", "ひらがな。", true},
      {"root ::= [ぁ-ゟ]+ \"。\"", "カタカナ。", false},
      {"root ::= \"é\"", "\xC3\xA9", true},
      {"root ::= \"é\"", "e", false},
      // Invalid UTF-8 is never accepted, even by '.'.
      {"root ::= .+", "\xC3\x28", false},
      {"root ::= .+", "\xC0\xAF", false},                // overlong '/'
      {"root ::= .+", "\xE0\x80\xAF", false},            // overlong
      {"root ::= .+", "\xED\xA0\x80", false},            // a surrogate
      {"root ::= .+", "\xF4\x90\x80\x80", false},        // above U+10FFFF
      {"root ::= .+", "\xF5\x80\x80\x80", false},
      {"root ::= .+", "\x80", false},
      {"root ::= .+", "\xC3", false},                    // unfinished
      {"root ::= .+", "\xED\x9F\xBF\xF4\x8F\xBF\xBF", true},  // U+D7FF U+10FFFF
      // Right recursion.
      {"root ::= \"(\" root \")\" | \"\"", "((()))", true},
      {"root ::= \"(\" root \")\" | \"\"", "(()", false},
      // Comments and a newline inside groups.
      {"root ::= (\n  \"a\" # first\n  | \"b\" # second\n)+", "abba", true},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(matches(c.grammar, c.text), c.accepted) << "grammar: " << c.grammar << "\ntext: " << c.text;
  }
}

TEST(GrammarMatcher, JsonGrammar) {
  GrammarMatcher m(Grammar::parse(kJsonGrammar));
  for (const std::string doc : {"{}", "[]", "\"x\"", "-0.5e+3", "true", "null",
                                "{\"a\": [1, 2, {\"b\": null}], \"c\": \"\\u00e9\\n\"}", "[\n  1,\n  \"\xC3\xA9\"\n]"}) {
    EXPECT_TRUE(m.matches(doc)) << doc;
  }
  for (const std::string doc : {"{", "[1,]", "{\"a\" 1}", "\"\n\"", "01", "tru", "{\"a\":1}}", "\"\\x\""}) {
    EXPECT_FALSE(m.matches(doc)) << doc;
  }
}

TEST(GrammarMatcher, BytesArriveSplitInsideCharacters) {
  GrammarMatcher m(Grammar::parse("root ::= [ぁ-ゟ]{2}"));
  const std::string text = "ひら";  // E3 81 B2 E3 82 89
  GrammarMatcher::StateId s = m.state();
  for (size_t i = 0; i < text.size(); ++i) {
    EXPECT_FALSE(m.can_end(s)) << i;
    s = m.step(s, static_cast<uint8_t>(text[i]));
    ASSERT_NE(s, GrammarMatcher::kDead) << "byte " << i;
  }
  EXPECT_TRUE(m.can_end(s));
  EXPECT_TRUE(m.must_end(s));
  // A lead byte whose characters all fall outside the class dies at once:
  // E4 starts U+4000..U+4FFF.
  EXPECT_EQ(m.step(m.state(), 0xE4), GrammarMatcher::kDead);
  // E3 80 is U+3000..U+303F, all below ぁ (U+3041): dead on the second byte.
  EXPECT_EQ(m.walk(m.state(), "\xE3\x80"), GrammarMatcher::kDead);
  EXPECT_NE(m.walk(m.state(), "\xE3\x81"), GrammarMatcher::kDead);
  EXPECT_TRUE(m.is_prefix("\xE3"));
}

TEST(GrammarMatcher, AcceptMovesOnlyOnSuccess) {
  GrammarMatcher m(Grammar::parse("root ::= \"ab\" [0-9]*"));
  EXPECT_FALSE(m.accept("x"));
  EXPECT_TRUE(m.accept("a"));
  EXPECT_FALSE(m.can_end(m.state()));
  EXPECT_FALSE(m.accept("a"));
  EXPECT_TRUE(m.accept("b"));
  EXPECT_TRUE(m.can_end(m.state()));
  EXPECT_FALSE(m.must_end(m.state()));  // digits may follow
  EXPECT_TRUE(m.accept("12"));
  EXPECT_TRUE(m.can_end(m.state()));
}

TEST(GrammarMatcher, StatesAreSharedAndRepeat) {
  // Inside x* the configuration after each x is the same state: what makes
  // masks reusable from token to token.
  GrammarMatcher m(Grammar::parse("root ::= \"[\" [a-z]* \"]\""));
  const GrammarMatcher::StateId a = m.walk(m.state(), "[a");
  const GrammarMatcher::StateId b = m.walk(m.state(), "[abcdef");
  EXPECT_EQ(a, b);
  // A bounded count is part of the state.
  GrammarMatcher bounded(Grammar::parse("root ::= [a-z]{0,5}"));
  EXPECT_NE(bounded.walk(bounded.state(), "a"), bounded.walk(bounded.state(), "ab"));
}

TEST(GrammarMatcher, LargeCountsCostNoRules) {
  // Counts are counters, not unrolled rules: a million is as cheap as two.
  GrammarMatcher m(Grammar::parse("root ::= \"a\"{1000000} \"b\""));
  EXPECT_TRUE(m.is_prefix(std::string(1000, 'a')));
  EXPECT_FALSE(m.matches(std::string(1000, 'a') + "b"));
  GrammarMatcher n(Grammar::parse("root ::= (\"a\"?){0,1000000} \"b\""));
  EXPECT_TRUE(n.matches("aab"));
  EXPECT_LT(n.state_count(), 20u);
}

TEST(GrammarMatcher, TrimKeepsTheCurrentState) {
  // A count per position makes a new state each byte; past the limit the
  // caches restart from the current state and matching goes on.
  GrammarMatcher m(Grammar::parse("root ::= \"a\"{0,30000} \"b\""));
  const uint64_t epoch = m.epoch();
  for (int i = 0; i < 20000; ++i) {
    ASSERT_TRUE(m.accept("a")) << i;
    m.trim_if_large();
  }
  EXPECT_GT(m.epoch(), epoch);
  EXPECT_LE(m.state_count(), GrammarMatcher::kTrimStates + 1);
  EXPECT_FALSE(m.can_end(m.state()));
  EXPECT_TRUE(m.accept(std::string(10000, 'a')));
  EXPECT_FALSE(m.accept("a"));  // 30000 reached
  EXPECT_TRUE(m.accept("b"));
  EXPECT_TRUE(m.must_end(m.state()));
  // The start state is rebuilt too.
  EXPECT_TRUE(m.matches("aab"));
}

TEST(GrammarMatcher, AmbiguityBeyondTheLimitIsAnError) {
  // 150 x 150 positions where one "a" can be read: more parses alive at once
  // than the matcher keeps.
  std::string g = "root ::=";
  for (int i = 0; i < 150; ++i) g += " c";
  g += "\nc ::=";
  for (int i = 0; i < 150; ++i) g += " b";
  g += "\nb ::= \"a\"?\n";
  try {
    GrammarMatcher m(Grammar::parse(g));  // the first "a" may stand in any of them
    m.accept("a");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too ambiguous"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sipllm
