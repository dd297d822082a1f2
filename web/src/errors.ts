import type { StallDump } from './probe.js';

// Typed errors. Every failure of the engine arrives with the kind the engine
// gave it (its ErrorKind) and a message naming what was wrong; each kind has
// its own class, so callers can tell them apart with instanceof.

export type ErrorKind =
  | 'network'           // the server could not be reached or answered out of protocol
  | 'format'            // not a valid GGUF model, or one that contradicts itself
  | 'unsupported'       // valid, but uses something the engine lacks (or no chat template)
  | 'aborted'           // cancelled through an AbortSignal
  | 'out-of-budget'     // the memory budget (or the 4 GiB heap) is too small for what was asked
  | 'io'                // bytes could not be read from where they were stored
  | 'invalid-argument'  // an option or argument out of range
  | 'context-full'      // the prompt plus the tokens asked for exceed the context
  | 'stalled'           // the engine made no progress for LoadOptions.stallTimeoutMs
  | 'internal';         // the engine worker failed in an unexpected way

export class SipLLMError extends Error {
  readonly kind: ErrorKind;

  constructor(kind: ErrorKind, message: string) {
    super(message);
    this.kind = kind;
    this.name = 'SipLLMError';
  }
}

export class NetworkError extends SipLLMError {
  constructor(message: string) {
    super('network', message);
    this.name = 'NetworkError';
  }
}

export class FormatError extends SipLLMError {
  constructor(message: string) {
    super('format', message);
    this.name = 'FormatError';
  }
}

export class UnsupportedError extends SipLLMError {
  constructor(message: string) {
    super('unsupported', message);
    this.name = 'UnsupportedError';
  }
}

// Named like the DOM's, so that `error.name === 'AbortError'` checks work too.
export class AbortError extends SipLLMError {
  constructor(message: string) {
    super('aborted', message);
    this.name = 'AbortError';
  }
}

export class OutOfBudgetError extends SipLLMError {
  constructor(message: string) {
    super('out-of-budget', message);
    this.name = 'OutOfBudgetError';
  }
}

export class IoError extends SipLLMError {
  constructor(message: string) {
    super('io', message);
    this.name = 'IoError';
  }
}

export class InvalidArgumentError extends SipLLMError {
  /**
   * The option refused, as the package names it ('topP'), when the error is
   * an option outside the values it takes; the message then begins
   * "option 'topP' ".
   */
  readonly option?: string;

  constructor(message: string, option?: string) {
    super('invalid-argument', message);
    this.name = 'InvalidArgumentError';
    if (option !== undefined) this.option = option;
  }
}

export class ContextFullError extends SipLLMError {
  constructor(message: string) {
    super('context-full', message);
    this.name = 'ContextFullError';
  }
}

// A request made no progress for LoadOptions.stallTimeoutMs: no token, no
// computation, no byte arrived. Its worker was stopped (the persistent cache
// is left as it was: every write to it is complete before it is recorded);
// the next request loads the model again, from the cache when it holds it.
// `dump` says what each part of the worker was doing (see probe.ts).
export class EngineStalledError extends SipLLMError {
  constructor(message: string, readonly dump: StallDump) {
    super('stalled', message);
    this.name = 'EngineStalledError';
  }
}

// The typed error for a kind name as the engine reports it.
export function errorFromKind(kind: string, message: string, option?: string): SipLLMError {
  switch (kind) {
    case 'network': return new NetworkError(message);
    case 'format': return new FormatError(message);
    case 'unsupported': return new UnsupportedError(message);
    case 'aborted': return new AbortError(message);
    case 'out-of-budget': return new OutOfBudgetError(message);
    case 'io': return new IoError(message);
    case 'invalid-argument': return new InvalidArgumentError(message, option);
    case 'context-full': return new ContextFullError(message);
    default: return new SipLLMError('internal', message);
  }
}
