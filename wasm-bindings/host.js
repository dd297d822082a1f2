// The JavaScript half of the engine's I/O (see js_host.h), loaded with
// --pre-js into every realm the module runs in: the main runtime thread and
// each pthread's worker.
//
// Module.sipllmHost is what the C++ side calls. Range requests of the
// threaded build start on the main runtime thread, which never computes:
// the web package streams them into the heap while the calling thread waits
// (startRange; in a browser on fetch workers of their own); the
// single-thread build blocks its one thread instead (getRange: a
// synchronous XMLHttpRequest in a browser, a fetcher thread under Node).
// Stores, byte buffers and events belong to the main runtime thread too: the
// web package registers them in Module.sipllmRegistry there ({stores, bytes,
// onEvent, startRange, fetchRangeSource}), and the C++ side proxies calls to
// them.
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

  // ---- Threaded build: requests made on the main runtime thread --------------------
  //
  // The calling thread (js_host.cpp) allocates a call record: an int32 state,
  // a uint32 for the answer, an int32 counting arrivals, then the URL as a C
  // string. It asks this thread to start the request and waits on the state
  // with Atomics.wait. The web package fetches the range and copies the body
  // straight to its destination in the heap while the state says the caller
  // still waits (web/src/bridge/range-fetch.ts, HeapTarget); the answer is
  // handed over here. A caller that gave up (ABANDONED) owns nothing any
  // more, and the record is freed here.
  var CALL_RUNNING = 0, CALL_DONE = 1;  // and 2: abandoned by the caller

  function startRange(call, offset, length, dst, timeoutMs) {
    var answered;
    try {
      answered = registry().startRange(UTF8ToString(call + 12), offset, length, timeoutMs, call, dst);
    } catch (error) {
      answered = Promise.reject(error);
    }
    answered.catch(function (error) {
      return { status: 0, bodyBytes: 0, error: 'request failed: ' + describeError(error) };
    }).then(function (r) {
      var answer = record(r);
      new Uint32Array(wasmMemory.buffer)[(call + 4) >>> 2] = answer;
      var w = new Int32Array(wasmMemory.buffer);
      if (Atomics.compareExchange(w, call >>> 2, CALL_RUNNING, CALL_DONE) !== CALL_RUNNING) {
        _free(answer);
        _free(call);
        return;
      }
      Atomics.notify(w, call >>> 2);
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

  // The range function is the web package's (registry().fetchRangeSource).
  function fetcherSource() {
    return [
      "const { workerData } = require('worker_threads');",
      "const { signal, port } = workerData;",
      'const fetchRange = ' + registry().fetchRangeSource + ';',
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
  }

  var fetcher = null;  // made on first use

  function startFetcher() {
    var threads = require('worker_threads');
    // [0]: an answer is waiting; [1]: counts arrivals, so the caller knows a
    // slow transfer is still moving.
    var signal = new Int32Array(new SharedArrayBuffer(8));
    var channel = new threads.MessageChannel();
    var worker = new threads.Worker(fetcherSource(), {
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
    // The WebAssembly.Memory itself: the web package's fetch workers write
    // bodies into it (shared in the threaded builds).
    wasmMemory: function () { return wasmMemory; },
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
