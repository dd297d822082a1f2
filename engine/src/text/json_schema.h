// JSON Schema to GBNF (the public entry points are in sipllm/grammar.h).
#pragma once

#include <string>

#include "text/json.h"

namespace sipllm {

// The grammar of the documents valid under `schema` (see
// json_schema_to_grammar for what is supported).
std::string compile_json_schema(const JsonValue& schema);

// A GBNF string literal for `text` (quotes, backslashes and control
// characters escaped).
std::string gbnf_literal(std::string_view text);

}  // namespace sipllm
