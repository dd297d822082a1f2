// The Embind surface, declared once: bindings.cpp registers each function
// under its name, bridge_types.cpp writes its TypeScript signature into
// web/src/bridge/bridge.generated.ts (EngineSession, EngineModuleFunctions).
//
// X(jsName, function, TypeScript signature, doc). Calls answered at once
// return an Answer: {value} or {error: {kind, message}}.
//
// Free of Emscripten, so that the generator builds natively (it reads the
// names and signatures only).
#pragma once

// The methods of a Session (new Module.Session(id)); Embind adds delete().
#define SIPLLM_SESSION_METHODS(X)                                                                                   \
  X(openUrl, open_url, "(url: string, options: EngineOpenOptions): Answer<undefined>", "")                         \
  X(openBytes, open_bytes, "(bytesId: number, size: number, name: string, options: EngineOpenOptions): Answer<undefined>", \
    "")                                                                                                             \
  X(generate, generate, "(prompt: string, options: EngineGenerateOptions): Answer<undefined>",                      \
    "A job: its events reach Module.sipllmHost.event (tokens, done, progress, alive).")                             \
  X(generateTokens, generate_tokens, "(tokens: number[], options: EngineGenerateOptions): Answer<undefined>", "")   \
  X(embed, embed, "(texts: string[], options: EngineEmbedOptions): Answer<undefined>", "")                         \
  X(warmUp, warm_up, "(milliseconds: number): Answer<undefined>", "")                                             \
  X(endWarmUp, end_warm_up, "(): void", "At any time: a running warm-up stops, the loader goes on.")             \
  X(liveUnits, live_units, "(): LiveUnit[]", "At any time, also while a job runs.")                               \
  X(takeTokens, take_tokens, "(): Array<{ token: number; text: string }>", "")                                     \
  X(takeResult, take_result, "(): JobOutcome", "How the last job ended.")                                         \
  X(busy, busy, "(): boolean", "")                                                                                 \
  X(cancel, cancel, "(): number", "Tokens generated so far.")                                                      \
  X(info, info, "(): Answer<ModelInfo>", "")                                                                       \
  X(tokenize, tokenize, "(text: string, addSpecial: boolean, parseSpecial: boolean): Answer<Int32Array>", "")      \
  X(detokenize, detokenize, "(tokens: number[]): Answer<string>", "")                                             \
  X(reset, reset, "(): Answer<undefined>", "")                                                                     \
  X(stats, stats, "(): Answer<SessionStats>", "")                                                                  \
  X(close, close, "(): void", "Then wait for the 'closed' event before delete().")                                \
  X(probeAddress, probe_address, "(): number", "Where its probe lies in the memory (web/src/probe.ts).")          \
  X(holdJobs, hold_jobs, "(held: boolean): Answer<undefined>", "A test's hook: no job starts while held (threaded builds).") \
  X(holdEngineLock, hold_engine_lock, "(milliseconds: number): void",                                              \
    "A test's hook: this thread holds the engine's lock, waiting (Session::hold_engine_lock).")

// The module's functions (Module.name).
#define SIPLLM_MODULE_FUNCTIONS(X)                                                                            \
  X(listCachedModels, list_cached_models_js, "(storeId: number): Answer<CachedModel[]>", "")                   \
  X(deleteCachedModel, delete_cached_model_js, "(storeId: number, url: string): Answer<undefined>", "")       \
  X(jsonSchemaToGrammar, json_schema_to_grammar_js, "(schema: string): Answer<string>", "")                   \
  X(jsonObjectGrammar, json_object_grammar_js, "(): Answer<string>", "")                                      \
  X(toolCallGrammar, tool_call_grammar_js,                                                                    \
    "(callSchema: string, open: string, close: string, parallel: boolean): Answer<string>", "")              \
  X(runQueuedCalls, run_queued_calls, "(): void", "Runs what the engine's threads queued for this thread.")   \
  X(checkGenerateOptions, check_generate_options_js, "(options: EngineGenerateOptions, nVocab: number): Answer<undefined>", \
    "Holds the options to the engine's ranges as generate does first, for a model of nVocab tokens.")
