#include "js_host.h"

#include <emscripten/em_asm.h>
#include <emscripten/em_js.h>
#include <emscripten/emscripten.h>
#include <emscripten/threading.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "sipllm/error.h"

namespace sipllm::wasm {
namespace {

// Takes ownership of a string JavaScript allocated with _malloc.
std::string adopt_js_string(char* text) {
  if (text == nullptr) return {};
  std::string out(text);
  std::free(text);
  return out;
}

// Splits "a\nb\n...": the first `fields - 1` lines, then everything after them.
std::vector<std::string> split_record(const std::string& text, size_t fields) {
  std::vector<std::string> out;
  size_t at = 0;
  while (out.size() + 1 < fields) {
    const size_t end = text.find('\n', at);
    if (end == std::string::npos) break;
    out.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  out.push_back(text.substr(at));
  out.resize(fields);
  return out;
}

HttpRangeResponse parse_range_record(const std::string& text) {
  const std::vector<std::string> f = split_record(text, 8);
  HttpRangeResponse response;
  response.status = std::atoi(f[0].c_str());
  response.body_bytes = std::strtoull(f[1].c_str(), nullptr, 10);
  response.content_range = f[2];
  response.etag = f[3];
  response.last_modified = f[4];
  response.retry_after = f[5];
  response.failure = f[6] == "stalled"     ? HttpFailure::kStalled
                     : f[6] == "redirects" ? HttpFailure::kTooManyRedirects
                                           : HttpFailure::kNone;
  response.error = f[7];
  return response;
}

#if SIPLLM_WASM_THREADS

// A request handed to the main runtime thread (host.js, startRange): the
// state word both sides hand the destination over with, the answer, a count
// of arrivals, then the URL. Allocated with malloc: a caller that gives up
// leaves it to JavaScript to free.
struct RangeCall {
  enum State : int32_t { kRunning = 0, kDone = 1, kAbandoned = 2, kWriting = 3 };
  std::atomic<int32_t> state;
  uint32_t record;                // a C string from _malloc, written before state becomes kDone
  std::atomic<int32_t> arrivals;  // bumped by JavaScript whenever bytes arrive
  char url[1];                    // the URL, NUL-terminated, running past the struct
};
static_assert(sizeof(std::atomic<int32_t>) == 4 && std::atomic<int32_t>::is_always_lock_free,
              "host.js reads the state with Atomics on an Int32Array");
static_assert(offsetof(RangeCall, record) == 4 && offsetof(RangeCall, arrivals) == 8 &&
                  offsetof(RangeCall, url) == 12,
              "host.js reads these offsets");

// How long past the read timeout (since the last arrival) a request may go
// unanswered before the caller stops waiting: JavaScript applies the read
// timeout itself and the main runtime thread is never busy for long, so only
// a broken page gets here.
constexpr double kAnswerGraceMs = 30000;

#endif

}  // namespace
}  // namespace sipllm::wasm

// Runs on the calling thread. Returns "status\nbody_bytes\ncontent_range\n
// etag\nlast_modified\nerror" in memory from _malloc.
EM_JS(char*, sipllm_js_get_range,
      (const char* url, double offset, double length, uint8_t* dst, double timeout_ms), {
  return Module.sipllmHost.getRange(UTF8ToString(url), offset, length, dst >>> 0, timeout_ms);
});

namespace sipllm::wasm {
namespace {

class JsTransport final : public HttpTransport {
 public:
  JsTransport(TransportProbe* probe, EngineProbe* beats) : probe_(probe), beats_(beats) {}

  HttpRangeResponse get_range(const std::string& url, uint64_t offset, uint64_t length,
                              uint8_t* dst, double read_timeout_ms) override {
    if (aborted_) return aborted_response();
#if SIPLLM_WASM_THREADS
    if (!emscripten_is_main_runtime_thread()) {
      InFlight counted(probe_);
      return get_range_on_main_thread(url, offset, length, dst, read_timeout_ms);
    }
#endif
    return parse_range_record(adopt_js_string(sipllm_js_get_range(
        url.c_str(), static_cast<double>(offset), static_cast<double>(length), dst, read_timeout_ms)));
  }

  void abort() override { aborted_ = true; }

 private:
  // Counts a request in the probe for as long as it is under way.
  struct InFlight {
    explicit InFlight(TransportProbe* probe) : probe(probe) {
      if (probe != nullptr) probe->in_flight.fetch_add(1);
    }
    ~InFlight() {
      if (probe != nullptr) probe->in_flight.fetch_sub(1);
    }
    TransportProbe* probe;
  };

  static HttpRangeResponse aborted_response() {
    HttpRangeResponse response;
    response.error = "request abandoned";
    response.failure = HttpFailure::kAborted;
    return response;
  }

#if SIPLLM_WASM_THREADS
  // The request is made with fetch() on the main runtime thread, whose event
  // loop is free, and its body is copied there straight to `dst`; this thread
  // sleeps on the call's state word meanwhile. No JavaScript garbage piles up
  // on this thread, which stays busy in WebAssembly and is rarely collected.
  HttpRangeResponse get_range_on_main_thread(const std::string& url, uint64_t offset, uint64_t length,
                                             uint8_t* dst, double read_timeout_ms) {
    auto* call = static_cast<RangeCall*>(std::malloc(offsetof(RangeCall, url) + url.size() + 1));
    if (call == nullptr) throw std::bad_alloc();
    new (&call->state) std::atomic<int32_t>(RangeCall::kRunning);
    call->record = 0;
    new (&call->arrivals) std::atomic<int32_t>(0);
    std::memcpy(call->url, url.c_str(), url.size() + 1);
    MAIN_THREAD_ASYNC_EM_ASM({
      Module.sipllmHost.startRange($0 >>> 0, $1, $2, $3 >>> 0, $4);
    }, call, static_cast<double>(offset), static_cast<double>(length), dst, read_timeout_ms);

    // Moves on with every arrival: a slow transfer is never cut here.
    const double patience = read_timeout_ms + kAnswerGraceMs;
    double deadline = emscripten_get_now() + patience;
    int32_t arrivals = 0;
    for (;;) {
      int32_t state = call->state.load();
      if (state == RangeCall::kDone) break;
      if (call->arrivals.load() != arrivals) {
        const int32_t now_arrived = call->arrivals.load();
        if (probe_ != nullptr) probe_->arrivals.fetch_add(now_arrived - arrivals);
        if (beats_ != nullptr) beats_->beat();
        arrivals = now_arrived;
        deadline = emscripten_get_now() + patience;
      }
      const double left = deadline - emscripten_get_now();
      if ((left <= 0 || aborted_) && state == RangeCall::kRunning &&
          call->state.compare_exchange_strong(state, RangeCall::kAbandoned)) {
        // The call now belongs to JavaScript, which frees it when fetch() ends.
        if (aborted_) return aborted_response();
        HttpRangeResponse response;
        response.error = "request failed: the worker's main thread did not answer within " +
                         std::to_string(static_cast<long long>(patience)) + " ms";
        return response;
      }
      // A copy in progress (kWriting) ends within microseconds. Otherwise the
      // wait is short enough to notice an abort soon.
      const double wait_ms = state == RangeCall::kWriting ? 1 : std::clamp(left, 1.0, 100.0);
      emscripten_futex_wait(&call->state, static_cast<uint32_t>(state), wait_ms);
    }
    const std::string record =
        adopt_js_string(reinterpret_cast<char*>(static_cast<uintptr_t>(call->record)));
    std::free(call);
    return parse_range_record(record);
  }
#endif

  std::atomic<bool> aborted_{false};
  [[maybe_unused]] TransportProbe* const probe_;  // the threaded build's requests
  [[maybe_unused]] EngineProbe* const beats_;
};

class JsStore final : public CacheStore {
 public:
  explicit JsStore(int id) : id_(id) {}

  bool read(const std::string& name, uint64_t offset, void* dst, size_t length) override {
    return MAIN_THREAD_EM_ASM_INT({
      return Module.sipllmHost.storeRead($0, UTF8ToString($1), $2, $3 >>> 0, $4 >>> 0);
    }, id_, name.c_str(), static_cast<double>(offset), dst, length) == 1;
  }

  void write(const std::string& name, uint64_t offset, const void* src, size_t length) override {
    // JavaScript answers "" or why the write failed (a quota, a full disk).
    const std::string problem = adopt_js_string(reinterpret_cast<char*>(MAIN_THREAD_EM_ASM_INT({
      return Module.sipllmHost.storeWrite($0, UTF8ToString($1), $2, $3 >>> 0, $4 >>> 0);
    }, id_, name.c_str(), static_cast<double>(offset), src, length)));
    if (!problem.empty()) {
      throw Error(ErrorKind::kIo, "cache file " + name + ": " + problem);
    }
  }

  std::vector<std::pair<std::string, uint64_t>> list() override {
    // "name\tsize\n" per file.
    const std::string text = adopt_js_string(reinterpret_cast<char*>(MAIN_THREAD_EM_ASM_INT({
      return Module.sipllmHost.storeList($0);
    }, id_)));
    std::vector<std::pair<std::string, uint64_t>> files;
    size_t at = 0;
    while (at < text.size()) {
      size_t end = text.find('\n', at);
      if (end == std::string::npos) end = text.size();
      const std::string line = text.substr(at, end - at);
      const size_t tab = line.find('\t');
      if (tab != std::string::npos) {
        files.emplace_back(line.substr(0, tab), std::strtoull(line.c_str() + tab + 1, nullptr, 10));
      }
      at = end + 1;
    }
    return files;
  }

  void remove(const std::string& name) override {
    const std::string problem = adopt_js_string(reinterpret_cast<char*>(MAIN_THREAD_EM_ASM_INT({
      return Module.sipllmHost.storeRemove($0, UTF8ToString($1));
    }, id_, name.c_str())));
    if (!problem.empty()) throw Error(ErrorKind::kIo, "cache file " + name + ": " + problem);
  }

 private:
  const int id_;
};

class JsBytesSource final : public WeightSource {
 public:
  JsBytesSource(int id, uint64_t size, std::string name)
      : id_(id), size_(size), name_(std::move(name)) {}

  ~JsBytesSource() override {
    MAIN_THREAD_EM_ASM({ Module.sipllmHost.bytesRelease($0); }, id_);
  }

  uint64_t size() const override { return size_; }
  std::string describe() const override { return name_; }

  void read(uint64_t offset, void* dst, size_t length) override {
    if (offset > size_ || length > size_ - offset) {
      throw Error(ErrorKind::kIo, name_ + ": read of " + std::to_string(length) + " bytes at offset " +
                                      std::to_string(offset) + " runs past the end (" +
                                      std::to_string(size_) + " bytes)");
    }
    const int ok = MAIN_THREAD_EM_ASM_INT({
      return Module.sipllmHost.bytesRead($0, $1, $2 >>> 0, $3 >>> 0);
    }, id_, static_cast<double>(offset), dst, length);
    if (ok != 1) {
      throw Error(ErrorKind::kIo, name_ + ": the buffer no longer holds bytes at offset " +
                                      std::to_string(offset));
    }
  }

 private:
  const int id_;
  const uint64_t size_;
  const std::string name_;
};

}  // namespace

std::shared_ptr<HttpTransport> make_js_transport(TransportProbe* probe, EngineProbe* beats) {
  return std::make_shared<JsTransport>(probe, beats);
}

std::shared_ptr<CacheStore> make_js_store(int store_id) { return std::make_shared<JsStore>(store_id); }

std::unique_ptr<WeightSource> make_js_bytes_source(int bytes_id, uint64_t size, std::string name) {
  return std::make_unique<JsBytesSource>(bytes_id, size, std::move(name));
}

void post_tokens_ready(int session_id) {
  MAIN_THREAD_ASYNC_EM_ASM({ Module.sipllmHost.event($0, "tokens"); }, session_id);
}

void post_job_done(int session_id) {
  MAIN_THREAD_ASYNC_EM_ASM({ Module.sipllmHost.event($0, "done"); }, session_id);
}

void post_alive(int session_id) {
  MAIN_THREAD_ASYNC_EM_ASM({ Module.sipllmHost.event($0, "alive"); }, session_id);
}

void post_closed(int session_id) {
  MAIN_THREAD_ASYNC_EM_ASM({ Module.sipllmHost.event($0, "closed"); }, session_id);
}

void post_progress(int session_id, uint64_t loaded, uint64_t fetched, uint64_t from_cache,
                   uint64_t total, bool header) {
  MAIN_THREAD_ASYNC_EM_ASM({
    Module.sipllmHost.event($0, "progress", {loaded: $1, fetched: $2, fromCache: $3, total: $4, header: !!$5});
  }, session_id, static_cast<double>(loaded), static_cast<double>(fetched),
     static_cast<double>(from_cache), static_cast<double>(total), header ? 1 : 0);
}

}  // namespace sipllm::wasm
