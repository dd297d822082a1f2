// The JavaScript half of the engine's I/O (see js_host.h), loaded with
// --pre-js into every realm the module runs in: the main runtime thread and
// each pthread's worker.
//
// Module.sipllmHost is what the C++ side calls. Range requests of the
// threaded build are made with fetch() on the main runtime thread, which
// never computes, and streamed into the heap while the calling thread waits
// (startRange); the single-thread build blocks its one thread instead
// (getRange: a synchronous XMLHttpRequest in a browser, a fetcher thread
// under Node). Stores, byte buffers and events belong to the main runtime
// thread too: the web package registers them in Module.sipllmRegistry there
// ({stores, bytes, onEvent}), and the C++ side proxies calls to them.
Module['sipllmHost'] = (function () {
  var isNode = typeof process === 'object' && typeof process.versions === 'object' &&
      typeof process.versions.node === 'string';

  function heapView(pointer, length) {
    // A fresh view: another thread may have grown the memory since HEAPU8 was made.
    return new Uint8Array(wasmMemory.buffer, pointer, length);
  }

  // A string for the C++ side, in memory from _malloc (null for "").
  function toC(text) {
    if (!text) return 0;
    var size = lengthBytesUTF8(text) + 1;
    var pointer = _malloc(size);
    stringToUTF8(text, pointer, size);
    return pointer;
  }

  function oneLine(text) {
    return String(text || '').replace(/[\r\n]+/g, ' ');
  }

  function describeError(error) {
    if (!error) return 'unknown error';
    var text = error.message || String(error);
    var cause = error.cause;
    if (cause) text += ' (' + (cause.code || cause.message || String(cause)) + ')';
    return text;
  }

  // The answer as js_host.cpp parses it: one line per field, the error last.
  function record(r) {
    return toC(r.status + '\n' + r.bodyBytes + '\n' + oneLine(r.contentRange) + '\n' +
               oneLine(r.etag) + '\n' + oneLine(r.lastModified) + '\n' + oneLine(r.retryAfter) + '\n' +
               (r.failure || '') + '\n' + (r.error || ''));
  }

  // ---- One range GET with fetch(), its body streamed into a sink ------------------
  //
  // sink(chunk, at) receives the pieces of a 200 or 206 body that fall within
  // `length`, in order (`at` is where the piece starts in the body), and
  // returns false to stop the transfer. onBytes(), when given, is called
  // whenever bytes arrive. Resolves with what the C++ side reads (see
  // record()): `failure` is 'stalled' when nothing arrived for timeoutMs (the
  // read timeout: a transfer that keeps moving is never cut, however slow),
  // 'redirects' when the redirect limit was hit. Self-contained (no names
  // from around it), so that Node's fetcher thread can run the same function
  // from its source.
  async function fetchRange(url, offset, length, timeoutMs, sink, onBytes) {
    function describe(e) {
      if (!e) return 'unknown error';
      var text = e.message || String(e);
      if (e.cause) text += ' (' + (e.cause.code || e.cause.message || String(e.cause)) + ')';
      return text;
    }
    var inNode = typeof process === 'object' && process !== null && typeof process.versions === 'object';
    var range = 'bytes=' + offset + '-' + (offset + length - 1);
    var controller = new AbortController();
    var stalled = false;
    var timer = null;
    // (Re)starts the read timeout: called whenever something arrives.
    function arm() {
      if (timer !== null) clearTimeout(timer);
      timer = setTimeout(function () {
        stalled = true;
        controller.abort(new Error('no bytes for ' + timeoutMs + ' ms'));
      }, timeoutMs);
    }
    var out = { status: 0, bodyBytes: 0, contentRange: '', etag: '', lastModified: '', retryAfter: '',
                failure: '', error: '' };
    arm();
    try {
      var response;
      try {
        // no-store: the engine keeps its own cache; the browser's would write
        // a second copy of every range to disk, and it makes requests for one
        // URL wait on each other (Chromium's cache lock), which serialises
        // small ones such as a prompt's embedding rows.
        response = await fetch(url, { headers: { Range: range }, redirect: 'follow', cache: 'no-store',
                                      signal: controller.signal });
      } catch (e) {
        if (stalled) {
          out.failure = 'stalled';
          out.error = 'no answer for ' + timeoutMs + ' ms';
          return out;
        }
        var cause = e && e.cause ? String(e.cause.message || e.cause.code || e.cause) : '';
        if (/redirect count exceeded|too many redirects/i.test(cause)) {
          out.failure = 'redirects';
          out.error = 'request failed: ' + describe(e);
          return out;
        }
        if (inNode) {
          out.error = 'request failed: ' + describe(e);
          return out;
        }
        // A browser does not say why a request failed: a refused connection,
        // a CORS refusal and a redirect loop look alike. Asked once more
        // without following redirects, the server tells whether one was involved.
        out.error = 'request failed: ' + describe(e) + ' (a network error, or a CORS refusal)';
        var probe = new AbortController();
        var probeTimer = setTimeout(function () { probe.abort(); }, timeoutMs);
        var hop = await fetch(url, { headers: { Range: range }, redirect: 'manual', signal: probe.signal })
          .catch(function () { return null; });
        clearTimeout(probeTimer);
        if (hop !== null && hop.type === 'opaqueredirect') {
          out.error = 'request failed after a redirect: ' + describe(e) + ' (too many redirects, as in a ' +
                      'redirect loop, or a redirect target that cannot be reached or refused CORS)';
        }
        return out;
      }
      arm();
      out.status = response.status;
      out.contentRange = response.headers.get('content-range') || '';
      out.etag = response.headers.get('etag') || '';
      out.lastModified = response.headers.get('last-modified') || '';
      out.retryAfter = response.headers.get('retry-after') || '';
      var declared = response.headers.get('content-length');
      if ((response.status !== 200 && response.status !== 206) || !response.body) {
        if (response.body) await response.body.cancel().catch(function () {});
        return out;
      }
      // A byte stream is read into a buffer of our own ("bring your own
      // buffer"): Chromium then hands over up to 1 MiB a read instead of a
      // chunk of 64 KiB or less, and a range costs the renderer a few reads
      // (a cold load from localhost on 2 cores took 9.9-10.8 s instead of
      // 10.4-13.0; see web/src/page/early-fetch.ts, which reads so too).
      var byob = null;
      try {
        byob = response.body.getReader({ mode: 'byob' });
      } catch (e) {
        byob = null;  // not a byte stream: read as it comes
      }
      var reader = byob || response.body.getReader();
      var buffer = byob ? new ArrayBuffer(1 << 20) : null;
      var received = 0;
      try {
        for (;;) {
          var step = byob ? await reader.read(new Uint8Array(buffer)) : await reader.read();
          if (step.done) break;
          if (byob) buffer = step.value.buffer;  // the same memory, handed back for the next read
          arm();
          if (onBytes) onBytes();
          var chunk = step.value;
          var n = Math.min(chunk.length, length - received);
          if (n > 0 && !sink(chunk.subarray(0, n), received)) {
            await reader.cancel().catch(function () {});
            out.bodyBytes = received;
            out.error = 'the request was given up by the thread that made it';
            return out;
          }
          received += chunk.length;
          if (received > length) {
            // Longer than asked (a server that ignored Range): stop reading.
            await reader.cancel().catch(function () {});
            out.bodyBytes = declared !== null ? Number(declared) : received;
            return out;
          }
        }
        out.bodyBytes = received;
      } catch (e) {
        out.bodyBytes = received;
        if (stalled) out.failure = 'stalled';
        out.error = (stalled ? 'no bytes for ' + timeoutMs + ' ms, the transfer stopped' : 'the connection closed') +
                    ' after ' + received + ' of ' + (declared !== null ? declared : 'an unknown number of') +
                    ' body bytes: ' + describe(e);
      }
      return out;
    } finally {
      clearTimeout(timer);
    }
  }

  // ---- Threaded build: requests made on the main runtime thread --------------------
  //
  // The calling thread (js_host.cpp) allocates a call record: an int32 state,
  // a uint32 for the answer, an int32 counting arrivals, then the URL as a C
  // string. It asks this thread to start the request and waits on the state
  // with Atomics.wait; the body is copied chunk by chunk straight to its
  // destination in the heap. The state word hands the destination over
  // safely: a chunk is copied only while the state is RUNNING (WRITING marks
  // a copy in progress); a caller that gave up (ABANDONED) owns nothing any
  // more, and the record is freed here. The arrival count tells the caller
  // that a slow transfer is still moving.
  var CALL_RUNNING = 0, CALL_DONE = 1, CALL_WRITING = 3;  // and 2: abandoned by the caller

  function startRange(call, offset, length, dst, timeoutMs) {
    var state = call >>> 2;
    var words = function () { return new Int32Array(wasmMemory.buffer); };
    var url = UTF8ToString(call + 12);
    var arrived = function () { Atomics.add(words(), (call + 8) >>> 2, 1); };
    var sink = function (chunk, at) {
      var w = words();
      if (Atomics.compareExchange(w, state, CALL_RUNNING, CALL_WRITING) !== CALL_RUNNING) return false;
      heapView(dst + at, chunk.length).set(chunk);
      Atomics.store(w, state, CALL_RUNNING);
      return true;
    };
    // The web package's early pieces of the file (web/src/bridge/early-pieces.ts)
    // answer what they hold; the rest is fetched here.
    var early = Module['sipllmRegistry'] && Module['sipllmRegistry'].early;
    var served = null;
    try {
      if (early) served = early.serve(url, offset, length, timeoutMs, sink, arrived, fetchRange);
    } catch (error) {
      served = null;  // never the engine's problem: the range is fetched as usual
    }
    (served || fetchRange(url, offset, length, timeoutMs, sink, arrived)).catch(function (error) {
      return { status: 0, bodyBytes: 0, error: 'request failed: ' + describeError(error) };
    }).then(function (r) {
      var answer = record(r);
      new Uint32Array(wasmMemory.buffer)[(call + 4) >>> 2] = answer;
      var w = words();
      if (Atomics.compareExchange(w, state, CALL_RUNNING, CALL_DONE) !== CALL_RUNNING) {
        _free(answer);
        _free(call);
        return;
      }
      Atomics.notify(w, state);
    });
  }

  // ---- Browser, single thread: a synchronous XMLHttpRequest (allowed in workers) -----

  // A synchronous request shows nothing until it ends, so no read timeout
  // can watch its bytes arrive: its limit is the whole transfer, the read
  // timeout plus the time the range takes at this slowest rate accepted.
  // Slower, a stalled server would hold a 1 MiB request for minutes per
  // attempt (at 8 kB/s, over two); faster, a slow link could not finish.
  var XHR_SLOWEST_BYTES_PER_MS = 64;  // 64 kB/s

  function xhrRange(url, offset, length, dst, timeoutMs) {
    var xhr = new XMLHttpRequest();
    var limitMs = Math.round(timeoutMs + length / XHR_SLOWEST_BYTES_PER_MS);
    try {
      xhr.open('GET', url, false);
      xhr.setRequestHeader('Range', 'bytes=' + offset + '-' + (offset + length - 1));
      xhr.responseType = 'arraybuffer';
      xhr.timeout = limitMs;
      xhr.send();
    } catch (error) {
      if (error && error.name === 'TimeoutError') {
        return { status: 0, bodyBytes: 0, error: 'no complete answer within ' + limitMs + ' ms (the read ' +
                 'timeout plus the range at 64 kB/s: a synchronous request cannot watch its bytes arrive)' };
      }
      // Refused, reset, closed before the end of the body, or refused by
      // CORS: the browser does not say which.
      return { status: 0, bodyBytes: 0, error: 'request failed: ' + describeError(error) +
               ' (a network error, a connection closed early, a redirect loop, or a CORS refusal)' };
    }
    var body = xhr.response ? new Uint8Array(xhr.response) : new Uint8Array(0);
    if (xhr.status === 200 || xhr.status === 206) {
      var n = Math.min(length, body.length);
      heapView(dst, n).set(body.subarray(0, n));
    }
    return {
      status: xhr.status, bodyBytes: body.length,
      contentRange: xhr.getResponseHeader('Content-Range'),
      etag: xhr.getResponseHeader('ETag'),
      lastModified: xhr.getResponseHeader('Last-Modified'),
      retryAfter: xhr.getResponseHeader('Retry-After'),
    };
  }

  // ---- Node, single thread: fetch on a fetcher thread; the caller waits with Atomics.wait

  var FETCHER_SOURCE = [
    "const { workerData } = require('worker_threads');",
    "const { signal, port } = workerData;",
    'const fetchRange = ' + fetchRange.toString() + ';',
    "port.on('message', async ({ url, offset, length, timeoutMs }) => {",
    "  const body = new Uint8Array(length);",
    "  let answer;",
    "  try {",
    "    answer = await fetchRange(url, offset, length, timeoutMs, (chunk, at) => { body.set(chunk, at); return true; },",
    "                              () => Atomics.add(signal, 1, 1));",
    "    if (answer.status === 200 || answer.status === 206) answer.body = body.buffer;",
    "  } catch (e) {",
    "    answer = { status: 0, bodyBytes: 0, error: 'request failed: ' + ((e && e.message) || String(e)) };",
    "  }",
    "  port.postMessage(answer, answer.body ? [answer.body] : []);",
    "  Atomics.store(signal, 0, 1);",
    "  Atomics.notify(signal, 0);",
    "});",
  ].join('\n');

  var fetcher = null;  // made on first use

  function startFetcher() {
    var threads = require('worker_threads');
    // [0]: an answer is waiting; [1]: counts arrivals, so the caller knows a
    // slow transfer is still moving.
    var signal = new Int32Array(new SharedArrayBuffer(8));
    var channel = new threads.MessageChannel();
    var worker = new threads.Worker(FETCHER_SOURCE, {
      eval: true, workerData: { signal: signal, port: channel.port2 }, transferList: [channel.port2],
    });
    worker.unref();
    channel.port1.unref();
    return { signal: signal, port: channel.port1, receive: threads.receiveMessageOnPort };
  }

  function nodeRange(url, offset, length, dst, timeoutMs) {
    if (fetcher === null) fetcher = startFetcher();
    var h = fetcher;
    Atomics.store(h.signal, 0, 0);
    h.port.postMessage({ url: url, offset: offset, length: length, timeoutMs: timeoutMs });
    // The fetcher applies the read timeout itself; this only catches a
    // fetcher thread that stopped answering, with a grace period.
    var deadline = Date.now() + timeoutMs + 10000;
    var arrivals = Atomics.load(h.signal, 1);
    var message;
    for (;;) {
      Atomics.wait(h.signal, 0, 0, 1000);
      message = h.receive(h.port);
      if (message !== undefined) break;
      if (Atomics.load(h.signal, 1) !== arrivals) {
        arrivals = Atomics.load(h.signal, 1);
        deadline = Date.now() + timeoutMs + 10000;
      }
      if (Date.now() > deadline) {
        fetcher = null;  // a fetcher that stopped answering is not used again
        return { status: 0, bodyBytes: 0, error: 'request failed: the fetcher thread did not answer' };
      }
    }
    var answer = message.message;
    if (answer.body) {
      var n = Math.min(length, answer.bodyBytes, answer.body.byteLength);
      heapView(dst, n).set(new Uint8Array(answer.body, 0, n));
    }
    return answer;
  }

  // ---- Main runtime thread objects -------------------------------------------------------
  //
  // The functions below run from Emscripten's queue of calls proxied to this
  // thread. None may throw: an exception out of a queued call leaves the
  // queue marked as being run, for good, and every later event and request
  // of the engine would wait.

  function registry() {
    var r = Module['sipllmRegistry'];
    if (!r) throw new Error('no registry: the web package sets Module.sipllmRegistry');
    return r;
  }

  function store(id) {
    var s = registry().stores.get(id);
    if (!s) throw new Error('no cache store ' + id);
    return s;
  }

  return {
    // On the calling thread, blocking: the single-thread build's transport.
    getRange: function (url, offset, length, dst, timeoutMs) {
      var r;
      try {
        r = isNode ? nodeRange(url, offset, length, dst, timeoutMs) : xhrRange(url, offset, length, dst, timeoutMs);
      } catch (error) {
        r = { status: 0, bodyBytes: 0, error: 'request failed: ' + describeError(error) };
      }
      return record(r);
    },
    // On the main runtime thread: the threaded build's transport.
    startRange: startRange,
    // The WebAssembly memory (a SharedArrayBuffer in the threaded builds):
    // the page reads the engine's probe in it (web/src/probe.ts).
    memory: function () { return wasmMemory.buffer; },
    storeRead: function (id, name, offset, dst, length) {
      try {
        return store(id).read(name, offset, heapView(dst, length)) ? 1 : 0;
      } catch (error) {
        return 0;
      }
    },
    storeWrite: function (id, name, offset, src, length) {
      try {
        store(id).write(name, offset, heapView(src, length));
        return 0;
      } catch (error) {
        return toC(describeError(error));
      }
    },
    storeList: function (id) {
      try {
        return toC(store(id).list().map(function (f) { return f[0] + '\t' + f[1]; }).join('\n'));
      } catch (error) {
        return 0;
      }
    },
    storeRemove: function (id, name) {
      try {
        store(id).remove(name);
        return 0;
      } catch (error) {
        return toC(describeError(error));
      }
    },
    bytesRead: function (id, offset, dst, length) {
      try {
        var bytes = registry().bytes.get(id);
        if (!bytes || offset + length > bytes.length) return 0;
        heapView(dst, length).set(bytes.subarray(offset, offset + length));
        return 1;
      } catch (error) {
        return 0;
      }
    },
    bytesRelease: function (id) {
      try {
        registry().bytes.delete(id);
      } catch (error) {
        console.error('sipllm: releasing byte buffer ' + id + ' failed: ' + describeError(error));
      }
    },
    // Threaded builds: an event is handled once the JavaScript running now
    // has returned, never inside it. This thread runs queued calls whenever
    // it waits for a lock (Emscripten's mutex wait), so an event would
    // otherwise run inside a call into the engine that holds a lock, and a
    // handler that called the engine in turn (a cancel, the units' states)
    // would wait for that lock forever: the worker's thread, and with it
    // every request and range of the engine, stopped. The single-thread
    // build runs its jobs inside the call that started them: its events are
    // the only moments its page can act, so they are handled at once.
    event: function (sessionId, kind, data) {
      var handle = function () {
        try {
          registry().onEvent(sessionId, kind, data);
        } catch (error) {
          console.error('sipllm: the ' + kind + ' event handler failed: ' + describeError(error));
        }
      };
      if (Module['threaded']) queueMicrotask(handle);
      else handle();
    },
  };
})();
