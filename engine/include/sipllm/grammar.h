// Grammars for constrained generation (GenerateOptions::grammar): checking
// a GBNF grammar, and compiling a JSON Schema into one.
//
//   sipllm::GenerateOptions options;
//   options.grammar = sipllm::json_schema_to_grammar(R"({"type": "object",
//       "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
//       "required": ["name", "age"]})");
//
// The grammar format is llama.cpp's GBNF (rules `name ::= ...`, starting at
// `root`); the JSON Schema compiler follows llama.cpp's
// json-schema-to-grammar: properties in the schema's order, required ones
// first; whitespace between tokens is none, one space, or one or two
// newlines and up to 20 blanks; `additionalProperties` absent means none.
#pragma once

#include <string>
#include <string_view>

#include "sipllm/error.h"

namespace sipllm {

// Parses `grammar` as Engine::generate would. Throws Error(kInvalidArgument)
// naming the line and column and what was expected (or the rule at fault).
void check_grammar(std::string_view grammar);

// Compiles a JSON Schema (a JSON text) into a GBNF grammar whose sentences
// are JSON documents valid under the schema.
//
// Supported: type (one or several), properties, required,
// additionalProperties (false, true or a schema; absent means false, as in
// llama.cpp), enum, const, items (a schema, or an array of them for a tuple),
// prefixItems (a tuple), minItems, maxItems, minLength, maxLength, minimum,
// maximum, exclusiveMinimum and exclusiveMaximum on integers, anyOf, oneOf
// (generated as anyOf: an output may match more than one alternative),
// allOf with one schema, $ref to any place in the same document
// ("#/$defs/...", "#/definitions/...", "#"), recursion included; formats
// date, time, date-time and uuid are generated as such, other formats are
// left free (they are annotations). Annotations (title, description,
// default, examples, $schema, $id, $comment, ...) are ignored.
//
// Throws Error(kInvalidArgument) for text that is not JSON or not a schema
// (naming the place, as a JSON pointer), and Error(kUnsupported) naming a
// keyword that would constrain the value but cannot be compiled (pattern,
// uniqueItems, not, if/then/else, multipleOf, minimum on a number, ...) or
// that is unknown, so that no constraint is dropped silently.
std::string json_schema_to_grammar(std::string_view schema);

// Any JSON object (OpenAI's response_format {"type": "json_object"}).
std::string json_object_grammar();

// Tool calls, each a JSON document valid under `call_schema`, between the
// tags `open` and `close`, each on a line of its own:
//   <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
// (the hermes style); when `parallel`, one or more calls, a newline between
// them. With no tags, one document alone (Llama 3's JSON style). Throws as
// json_schema_to_grammar.
std::string tool_call_grammar(std::string_view call_schema, std::string_view open, std::string_view close,
                              bool parallel);

}  // namespace sipllm
