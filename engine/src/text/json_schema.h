// JSON Schema to GBNF (the public entry points are in sipllm/grammar.h).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "text/json.h"

namespace sipllm {

// Makes the root rule's body of a grammar from the name of the rule of one
// document.
using RootWrap = std::function<std::string(const std::string& document_rule)>;

// The grammar of the documents valid under `schema` (see
// json_schema_to_grammar for what is supported); with `wrap`, of what its
// root makes of them.
std::string compile_json_schema(const JsonValue& schema, const RootWrap& wrap = nullptr);

// A GBNF string literal for `text` (quotes, backslashes and control
// characters escaped).
std::string gbnf_literal(std::string_view text);

}  // namespace sipllm
