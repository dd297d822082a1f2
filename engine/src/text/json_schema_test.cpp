// JSON Schema to grammar: tables of schemas with documents the grammar must
// accept and documents it must reject (each checked against an independent
// validator too, so the tables themselves are right), the rule structure
// llama.cpp writes, and the errors for what is not supported.
#include "text/json_schema.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "json_schema_check.h"
#include "sipllm/error.h"
#include "sipllm/grammar.h"
#include "text/grammar.h"
#include "text/json.h"

namespace sipllm {
namespace {

struct SchemaCase {
  std::string schema;
  std::vector<std::string> valid;
  std::vector<std::string> invalid;  // valid JSON, invalid under the schema
};

const std::vector<SchemaCase>& cases() {
  static const std::vector<SchemaCase> kCases = {
      // Required properties, in the schema's order.
      {R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
           "required": ["name", "age"]})",
       {R"({"name":"Al","age":3})", R"({ "name" : "x", "age": -12 })", R"({"name": "", "age": 0})",
        "{\n  \"name\": \"a\\\"b\",\n  \"age\": 5\n}", R"({"name":"\u00e9t\u00e9","age":1})"},
       {R"({"name":"Al"})", R"({"name":"Al","age":3.5})", R"({"name":1,"age":3})", R"({"age":3})", R"([])"}},
      // Optional properties: each at most once.
      {R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "null"}}})",
       {"{}", R"({"a":1})", R"({"b":true})", R"({"a":1,"c":null})", R"({"a":1,"b":false,"c":null})"},
       {R"({"a":"1"})", R"({"b":null})", R"({"a":1,"a":2})"}},
      // Required and optional together.
      {R"({"type": "object", "properties": {"id": {"type": "integer"}, "tag": {"type": "string"}}, "required": ["id"],
           "additionalProperties": false})",
       {R"({"id":1})", R"({"id":1,"tag":"x"})"},
       {R"({"tag":"x"})", R"({"id":1,"other":2})", "{}"}},
      // Additional properties.
      {R"({"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": true})",
       {R"({"id":1})", R"({"id":1,"x":"y"})", R"({"x":[1,2]})", R"({"ide":1})", R"({"i":{"j":null}})", "{}"},
       {R"({"id":"no"})", R"({"id":1,"id":2})"}},
      {R"({"type": "object", "additionalProperties": {"type": "number"}})",
       {"{}", R"({"a":1,"b":-2.5e3})"},
       {R"({"a":"x"})"}},
      {R"({"type": "object", "properties": {"ab": {"type": "integer"}, "b": {"type": "integer"}},
           "additionalProperties": {"type": "string"}})",
       {R"({"ab":1})", R"({"a":"x"})", R"({"abc":"x"})", R"({"b":2,"bb":"z"})", R"({"":"empty key"})"},
       {R"({"ab":"x"})", R"({"a":1})"}},
      // Any object; any value.
      {R"({"type": "object"})", {"{}", R"({"a":[1,{"b":null}],"c":"d"})"}, {"[]", "1", "\"x\"", "null"}},
      {R"({})", {"1", "\"x\"", "[]", R"({"a":null})", "true", "null"}, {}},
      {R"(true)", {"-0.5", "{}"}, {}},
      {R"({"description": "only an annotation"})", {"[1]"}, {}},
      // Required but not described: anything, when other keys are free.
      {R"({"type": "object", "required": ["a"]})", {R"({"a":1})", R"({"a":null,"b":2})"}, {"{}", R"({"b":2})"}},
      // Enum and const.
      {R"({"enum": ["red", "green", null, 1, [1, "a"]]})",
       {"\"red\"", "null", "1", "[1,\"a\"]"},
       {"\"blue\"", "\"1\"", "2", "[1]"}},
      {R"({"type": "string", "enum": ["a", 1, "b"]})", {"\"a\"", "\"b\""}, {"1", "\"c\""}},
      {R"({"const": {"a": [1, "x"]}})", {R"({"a":[1,"x"]})"}, {R"({"a":[1,"y"]})", "{}"}},
      {R"({"const": "say \"hi\"\n"})", {R"("say \"hi\"\n")"}, {R"("say hi")"}},
      // Arrays.
      {R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})",
       {"[1,2]", "[1, 2, 3]", "[ 4 ,5 ]"},
       {"[1]", "[1,2,3,4]", "[1,\"a\"]", "[]"}},
      {R"({"type": "array", "items": {"type": "string"}})", {"[]", "[\"a\",\"b\"]"}, {"[1]", "{}"}},
      {R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]})",
       {"[\"a\",1]"},
       {"[1,\"a\"]", "[true,1]"}},
      {R"({"type": "array", "items": [{"type": "boolean"}, {"type": "null"}], "additionalItems": false})",
       {"[true,null]"},
       {"[null,true]"}},
      {R"({"type": "array", "maxItems": 0})", {"[]"}, {"[1]"}},
      {R"({"type": "array", "minItems": 1})", {"[null]", "[1,{\"a\":2}]"}, {"[]"}},
      {R"({"type": "array", "items": {"type": "integer"}, "minItems": 0, "maxItems": 1})", {"[]", "[7]"}, {"[1,2]"}},
      // Strings.
      {R"({"type": "string", "minLength": 2, "maxLength": 3})",
       {"\"ab\"", "\"abc\"", "\"\xC3\xA9" "1\"", "\"a\\n\""},
       {"\"a\"", "\"abcd\"", "\"\""}},
      {R"({"type": "string", "format": "date"})", {"\"2024-02-29\"", "\"1999-12-31\""}, {"\"2024-13-01\"", "\"24-01-01\""}},
      {R"({"type": "string", "format": "time"})", {"\"23:59:59Z\"", "\"01:02:03.456+05:30\""}, {"\"24:00:00Z\"", "\"12:00\""}},
      {R"({"type": "string", "format": "date-time"})",
       {"\"2024-01-02T03:04:05Z\"", "\"2024-01-02T03:04:05.123-02:00\""},
       {"\"2024-01-02 03:04:05Z\""}},
      {R"({"type": "string", "format": "uuid"})", {"\"123e4567-e89b-12d3-a456-426614174000\""}, {"\"123e4567\""}},
      {R"({"type": "string", "format": "email"})", {"\"not checked: formats are annotations\""}, {"1"}},
      // Numbers.
      {R"({"type": "number"})", {"0", "-1.5", "2e10", "1E-3", "-0.25e+2"}, {"\"1\"", "null"}},
      {R"({"type": "integer"})", {"0", "-7", "123456"}, {"1.5", "\"1\""}},
      {R"({"type": "integer", "minimum": -5, "maximum": 150})",
       {"-5", "-1", "0", "7", "99", "100", "150"},
       {"-6", "151", "1000", "-10", "200"}},
      {R"({"type": "integer", "exclusiveMinimum": 0})", {"1", "123456"}, {"0", "-1"}},
      {R"({"type": "integer", "minimum": 10})", {"10", "99", "100", "1234567890"}, {"9", "0", "-10"}},
      {R"({"type": "integer", "maximum": -3})", {"-3", "-100"}, {"-2", "0", "5"}},
      {R"({"type": "integer", "minimum": 2.5, "exclusiveMaximum": 7.5})", {"3", "7"}, {"2", "8"}},
      {R"({"type": "integer", "minimum": 0, "exclusiveMinimum": true, "maximum": 3})", {"1", "3"}, {"0", "4"}},
      {R"({"type": "boolean"})", {"true", "false"}, {"0", "\"true\""}},
      {R"({"type": "null"})", {"null"}, {"0", "{}"}},
      // Unions.
      {R"({"anyOf": [{"type": "string"}, {"type": "integer"}]})", {"\"x\"", "3"}, {"1.5", "null"}},
      {R"({"oneOf": [{"type": "string", "maxLength": 1}, {"type": "array", "items": {"type": "null"}}]})",
       {"\"x\"", "[null]"},
       {"\"xy\"", "[1]"}},
      {R"({"type": ["string", "null"], "maxLength": 2})", {"\"ab\"", "null"}, {"\"abc\"", "1"}},
      {R"({"type": ["integer", "boolean"], "enum": [1, true, "x"]})", {"1", "true"}, {"\"x\"", "2", "false"}},
      {R"({"allOf": [{"type": "boolean"}], "description": "as Pydantic writes it"})", {"true"}, {"1"}},
      // References.
      {R"({"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
           "type": "array", "items": {"$ref": "#/$defs/pt"}})",
       {"[{\"x\":1}]", "[]"},
       {"[{\"y\":1}]"}},
      {R"({"$defs": {"node": {"type": "object",
                              "properties": {"v": {"type": "integer"},
                                             "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                              "required": ["v", "next"]}},
           "$ref": "#/$defs/node"})",
       {R"({"v":1,"next":{"v":2,"next":null}})", R"({"v":1,"next":null})"},
       {R"({"v":1,"next":{"v":2}})"}},
      {R"({"definitions": {"s": {"type": "string"}}, "type": "object", "properties": {"a": {"$ref": "#/definitions/s"}},
           "required": ["a"]})",
       {R"({"a":"x"})"},
       {R"({"a":1})"}},
      {R"({"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}, "required": ["kids"]})",
       {R"({"kids":[{"kids":[]},{"kids":[{"kids":[]}]}]})"},
       {R"({"kids":[{}]})"}},
      // Keys that JSON must escape, and keys beyond ASCII.
      {R"({"type": "object", "properties": {"say \"hi\"": {"type": "integer"}, "été": {"type": "boolean"}},
           "required": ["say \"hi\"", "été"]})",
       {R"({"say \"hi\"":1,"été":true})"},
       {R"({"say hi":1,"été":true})"}},
      // Nesting.
      {R"({"type": "object", "properties": {"user": {"type": "object", "properties": {
             "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}}, "required": ["tags"]}},
           "required": ["user"]})",
       {R"({"user":{"tags":["a","b"]}})", R"({"user":{"tags":[]}})"},
       {R"({"user":{"tags":["c"]}})", R"({"user":{"tags":["a","a","a"]}})", R"({"user":{}})"}},
  };
  return kCases;
}

TEST(JsonSchema, GrammarsAcceptValidAndRejectInvalidDocuments) {
  for (const SchemaCase& c : cases()) {
    const JsonValue schema = parse_json(c.schema);
    const test::SchemaCheck check(schema);
    std::string grammar;
    ASSERT_NO_THROW(grammar = json_schema_to_grammar(c.schema)) << c.schema;
    GrammarMatcher matcher(Grammar::parse(grammar));
    for (const std::string& doc : c.valid) {
      ASSERT_EQ(check.check(parse_json(doc)), "") << "the table is wrong: " << doc << "\nschema: " << c.schema;
      EXPECT_TRUE(matcher.matches(doc)) << "rejected: " << doc << "\nschema: " << c.schema << "\ngrammar:\n" << grammar;
    }
    for (const std::string& doc : c.invalid) {
      ASSERT_NE(check.check(parse_json(doc)), "") << "the table is wrong: " << doc << "\nschema: " << c.schema;
      EXPECT_FALSE(matcher.matches(doc)) << "accepted: " << doc << "\nschema: " << c.schema << "\ngrammar:\n" << grammar;
    }
  }
}

// Calls of tools: each JSON document between its tags, one or (parallel)
// several; a schema whose own rules take the name `call` keeps them.
TEST(JsonSchema, ToolCallGrammarsWrapEachCallInItsTags) {
  const std::string schema = R"({"type": "object", "properties": {"name": {"const": "f"},
      "arguments": {"$ref": "#/$defs/call"}}, "required": ["name", "arguments"],
      "$defs": {"call": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}})";
  const std::string one = "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"x\":1}}\n</tool_call>";
  const std::string two = one + "\n" + "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"x\":22}}\n</tool_call>";
  GrammarMatcher parallel(Grammar::parse(tool_call_grammar(schema, "<tool_call>", "</tool_call>", true)));
  EXPECT_TRUE(parallel.matches(one));
  EXPECT_TRUE(parallel.matches(two));
  EXPECT_FALSE(parallel.matches(one + "\n"));
  EXPECT_FALSE(parallel.matches("<tool_call>\n{\"name\":\"f\",\"arguments\":{\"x\":\"a\"}}\n</tool_call>"));
  EXPECT_FALSE(parallel.matches("{\"name\":\"f\",\"arguments\":{\"x\":1}}"));
  GrammarMatcher single(Grammar::parse(tool_call_grammar(schema, "<tool_call>", "</tool_call>", false)));
  EXPECT_TRUE(single.matches(one));
  EXPECT_FALSE(single.matches(two));
  // No tags: the document alone.
  GrammarMatcher bare(Grammar::parse(tool_call_grammar(schema, "", "", false)));
  EXPECT_TRUE(bare.matches("{\"name\":\"f\",\"arguments\":{\"x\":1}}"));
  EXPECT_FALSE(bare.matches(one));
  // Tags with characters GBNF literals escape.
  GrammarMatcher quoted(Grammar::parse(tool_call_grammar(schema, "<\"call\\>", "</\"call\\>", false)));
  EXPECT_TRUE(quoted.matches("<\"call\\>\n{\"name\":\"f\",\"arguments\":{\"x\":1}}\n</\"call\\>"));
  EXPECT_THROW(tool_call_grammar("{", "<a>", "</a>", false), Error);
}

TEST(JsonSchema, IntegerRangesAreExact) {
  // Every integer near the bounds, against the bounds themselves.
  const std::vector<std::pair<long, long>> ranges = {
      {0, 0},   {0, 9},     {0, 10},   {1, 99},     {5, 12},  {95, 1234}, {-5, 150}, {-150, -5},
      {-1, 1},  {-99, -10}, {7, 7},    {100, 100},  {19, 21}, {-1000, 1000}, {123, 456}, {998, 1001}};
  for (const auto& [lo, hi] : ranges) {
    const std::string schema = "{\"type\": \"integer\", \"minimum\": " + std::to_string(lo) +
                               ", \"maximum\": " + std::to_string(hi) + "}";
    GrammarMatcher m(Grammar::parse(json_schema_to_grammar(schema)));
    for (long n = lo - 120; n <= hi + 120; ++n) {
      EXPECT_EQ(m.matches(std::to_string(n)), n >= lo && n <= hi) << n << " in " << schema;
    }
    EXPECT_FALSE(m.matches("0" + std::to_string(std::abs(hi)))) << "leading zero, " << schema;
  }
  // Open ranges, up to the 16 digits the integer primitive allows.
  GrammarMatcher above(Grammar::parse(json_schema_to_grammar(R"({"type": "integer", "minimum": 37})")));
  for (long n = -50; n <= 2000; ++n) EXPECT_EQ(above.matches(std::to_string(n)), n >= 37) << n;
  EXPECT_TRUE(above.matches("9999999999999999"));
  GrammarMatcher below(Grammar::parse(json_schema_to_grammar(R"({"type": "integer", "exclusiveMaximum": -37})")));
  for (long n = -2000; n <= 50; ++n) EXPECT_EQ(below.matches(std::to_string(n)), n < -37) << n;
  // Bounds far beyond what can be generated bind nothing.
  EXPECT_NO_THROW(json_schema_to_grammar(R"({"type": "integer", "minimum": -1e60, "maximum": 1e60})"));
}

TEST(JsonSchema, RulesAsLlamaCppWritesThem) {
  // The example of llama.cpp's grammars/README.md: the same rules for the
  // array, the object, its key-value pairs and the bounded string.
  const std::string grammar = json_schema_to_grammar(R"({
    "type": "array",
    "items": {
      "type": "object",
      "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 100},
        "age": {"type": "integer", "minimum": 0, "maximum": 150}
      },
      "required": ["name", "age"],
      "additionalProperties": false
    },
    "minItems": 10,
    "maxItems": 100
  })");
  for (const std::string line : {
           R"(root ::= "[" space item ("," space item){9,99} "]" space)",
           R"(item ::= "{" space item-name-kv "," space item-age-kv "}" space)",
           R"(item-name-kv ::= "\"name\"" space ":" space item-name)",
           R"(item-age-kv ::= "\"age\"" space ":" space item-age)",
           R"(item-name ::= "\"" char{1,100} "\"" space)",
           R"(char ::= [^"\\\x7F\x00-\x1F] | [\\] (["\\bfnrt] | "u" [0-9a-fA-F]{4}))",
           R"(space ::= | " " | "\n"{1,2} [ \t]{0,20})"}) {
    EXPECT_NE(grammar.find(line + "\n"), std::string::npos) << line << "\nin:\n" << grammar;
  }
  // Optional properties chain through "-rest" rules.
  const std::string optional = json_schema_to_grammar(
      R"({"type": "object", "properties": {"a": {"type": "null"}, "b": {"type": "null"}, "c": {"type": "null"}}})");
  EXPECT_NE(optional.find(R"(root ::= "{" space  (a-kv a-rest | b-kv b-rest | c-kv )? "}" space)"), std::string::npos)
      << optional;
  EXPECT_NE(optional.find(R"(a-rest ::= ( "," space b-kv )? b-rest)"), std::string::npos) << optional;
  EXPECT_NE(optional.find(R"(b-rest ::= ( "," space c-kv )?)"), std::string::npos) << optional;
  // Any object, for response_format {"type": "json_object"}.
  const std::string object = json_object_grammar();
  EXPECT_NE(object.find(R"(root ::= "{" space ( string ":" space value ("," space string ":" space value)* )? "}" space)"),
            std::string::npos)
      << object;
}

struct BadSchema {
  std::string schema;
  ErrorKind kind;
  std::string message;
};

TEST(JsonSchema, UnsupportedOrInvalidSchemasAreRefusedByName) {
  const std::vector<BadSchema> bad = {
      {R"({"type": "string", "pattern": "^a$"})", ErrorKind::kUnsupported,
       "keyword 'pattern' is not supported: regular expressions are not compiled"},
      {R"({"type": "array", "uniqueItems": true})", ErrorKind::kUnsupported, "keyword 'uniqueItems' is not supported"},
      {R"({"not": {"type": "null"}})", ErrorKind::kUnsupported, "keyword 'not'"},
      {R"({"if": {}, "then": {}})", ErrorKind::kUnsupported, "keyword 'if'"},
      {R"({"type": "integer", "multipleOf": 2})", ErrorKind::kUnsupported, "keyword 'multipleOf'"},
      {R"({"type": "object", "minProperties": 1})", ErrorKind::kUnsupported, "keyword 'minProperties'"},
      {R"({"type": "object", "patternProperties": {}})", ErrorKind::kUnsupported, "keyword 'patternProperties'"},
      {R"({"type": "string", "nullable": true})", ErrorKind::kUnsupported, "keyword 'nullable'"},
      {R"({"type": "object", "requird": ["a"]})", ErrorKind::kUnsupported, "unknown keyword 'requird'"},
      {R"({"type": "number", "minimum": 0})", ErrorKind::kUnsupported, "minimum/maximum on type 'number'"},
      {R"({"properties": {"a": {"type": "string", "pattern": "x"}}})", ErrorKind::kUnsupported,
       "JSON schema at /properties/a: keyword 'pattern'"},
      {R"({"$ref": "http://example.com/s.json"})", ErrorKind::kUnsupported, "only references inside the schema"},
      {R"({"$ref": "#anchor"})", ErrorKind::kUnsupported, "anchors are not supported"},
      {R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})", ErrorKind::kUnsupported, "'allOf' with more than one"},
      {R"({"properties": {"a": {}}, "anyOf": [{"required": ["a"]}]})", ErrorKind::kUnsupported,
       "keyword 'properties' beside 'anyOf'"},
      {R"({"type": "string", "oneOf": [{"maxLength": 1}, {"minLength": 3}]})", ErrorKind::kUnsupported,
       "keyword 'type' beside 'oneOf'"},
      {R"({"$ref": "#/$defs/x", "maxLength": 2, "$defs": {"x": {"type": "string"}}})", ErrorKind::kUnsupported,
       "keyword 'maxLength' beside '$ref'"},
      {R"({"minLength": 1, "minimum": 2})", ErrorKind::kUnsupported, "keywords of several types"},
      {R"({"type": "array", "items": {"type": "string"}, "maxItems": 2000000})", ErrorKind::kUnsupported,
       "'maxItems' above 1000000"},
      {R"({"type": "array", "prefixItems": [{}], "items": {"type": "string"}})", ErrorKind::kUnsupported,
       "'items' beside 'prefixItems'"},
      {R"({"type": "integer", "minimum": 1e50})", ErrorKind::kUnsupported, "beyond 40 digits"},
      {R"({"type": "strin"})", ErrorKind::kInvalidArgument, "unknown type 'strin'"},
      {R"({"$ref": "#/$defs/none"})", ErrorKind::kInvalidArgument, "$ref '#/$defs/none' points to nothing"},
      {R"({"anyOf": [{"$ref": "#"}, {"type": "null"}]})", ErrorKind::kInvalidArgument, "left recursion"},
      {R"({"type": "integer", "minimum": 5, "maximum": 3})", ErrorKind::kInvalidArgument, "no integer lies"},
      {R"([1])", ErrorKind::kInvalidArgument, "a schema must be an object or a boolean, not array"},
      {R"(false)", ErrorKind::kInvalidArgument, "the schema false allows no value"},
      {R"({"type": "object" )", ErrorKind::kInvalidArgument, "JSON schema: JSON line 1, column 19"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"], "additionalProperties": false})",
       ErrorKind::kInvalidArgument, "required property 'b' is not in 'properties'"},
      {R"({"type": "string", "minLength": 5, "maxLength": 2})", ErrorKind::kInvalidArgument, "'maxLength' is below"},
      {R"({"type": "array", "minItems": -1})", ErrorKind::kInvalidArgument, "'minItems' must be a non-negative integer"},
      {R"({"enum": [1, 2], "type": "string"})", ErrorKind::kInvalidArgument, "no 'enum' value of type 'string'"},
      {R"({"const": 1, "type": "string"})", ErrorKind::kInvalidArgument, "'const' is not of type 'string'"},
      {R"({"anyOf": []})", ErrorKind::kInvalidArgument, "'anyOf' must be a non-empty array"},
  };
  for (const BadSchema& b : bad) {
    try {
      json_schema_to_grammar(b.schema);
      ADD_FAILURE() << "accepted: " << b.schema;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), b.kind) << b.schema << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(b.message), std::string::npos)
          << "schema: " << b.schema << "\nerror:  " << e.what() << "\nwanted: " << b.message;
    }
  }
}

TEST(JsonSchema, AnnotationsAreIgnored) {
  EXPECT_EQ(json_schema_to_grammar(R"({"type": "string"})"),
            json_schema_to_grammar(R"({"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "x",
                                       "title": "T", "description": "D", "default": "a", "examples": ["b"],
                                       "$comment": "c", "deprecated": false, "x-vendor": 1, "type": "string"})"));
}

TEST(JsonSchema, ManyPropertiesAndDeepSchemasDoNotRecurseAway) {
  std::string props;
  for (int i = 0; i < 3000; ++i) props += (i ? "," : "") + std::string("\"p") + std::to_string(i) + "\": {\"type\": \"null\"}";
  const std::string grammar = json_schema_to_grammar("{\"type\": \"object\", \"properties\": {" + props + "}}");
  GrammarMatcher m(Grammar::parse(grammar));
  EXPECT_TRUE(m.matches(R"({"p5":null,"p2999":null})"));
  EXPECT_FALSE(m.matches(R"({"p2999":null,"p5":null})"));
  // Nesting past the JSON reader's limit is an error, not a crash.
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += "{\"type\": \"array\", \"items\": ";
  deep += "{}" + std::string(200, '}');
  EXPECT_THROW(json_schema_to_grammar(deep), Error);
}

TEST(Json, ReadsWhatRfc8259Allows) {
  const JsonValue v = parse_json(R"( {"a": [1, -2.5e3, true, false, null], "b": "\u00e9\ud83d\ude00\n", "a": 0} )");
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v.members.size(), 3u);
  EXPECT_EQ(v.members[0].second.items[1].text, "-2.5e3");
  EXPECT_EQ(v.find("b")->text, "\xC3\xA9\xF0\x9F\x98\x80\n");
  EXPECT_TRUE(v.find("a")->is_number());  // the last of a repeated key
  EXPECT_EQ(to_json(v), R"({"a":[1,-2.5e3,true,false,null],"b":"é😀\n","a":0})");
  for (const char* bad : {"", "01", "1.", "[1,]", "{\"a\" 1}", "\"\x01\"", "'x'", "[1] 2", "\"\\x\"", "tru", "\"\xC3\""}) {
    EXPECT_THROW(parse_json(bad), Error) << bad;
  }
}

}  // namespace
}  // namespace sipllm
