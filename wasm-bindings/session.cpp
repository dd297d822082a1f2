#include "session.h"

#include <algorithm>
#include <climits>
#include <cstddef>
#include <iterator>
#include <new>
#include <utility>

#include <emscripten/threading.h>

#include "js_host.h"
#include "sipllm/error.h"

namespace sipllm::wasm {
namespace {

constexpr uint64_t kMinProgressStep = 64u << 10;
constexpr uint64_t kProgressEventsPerFile = 200;
// How often a busy engine says it is alive: well inside any watchdog's
// patience, rare enough to cost nothing.
constexpr double kAlivePeriodMs = 250;

// The page reads the probe by these offsets (web/src/probe.ts).
static_assert(offsetof(SessionProbe, job) == 0 && offsetof(SessionProbe, job_state) == 4 &&
                  offsetof(SessionProbe, job_cancelled) == 8 && offsetof(SessionProbe, session_id) == 12 &&
                  offsetof(SessionProbe, http) == 16 && offsetof(TransportProbe, arrivals) == 4 &&
                  offsetof(SessionProbe, jobs_done) == 24 &&
                  offsetof(SessionProbe, engine) == 64,
              "web/src/probe.ts reads the session's words at these offsets");
static_assert(offsetof(EngineProbe, beats) == 0 && offsetof(EngineProbe, cancelled) == 4 &&
                  offsetof(EngineProbe, waiting_for_unit) == 8 && offsetof(EngineProbe, units_loading) == 12 &&
                  offsetof(EngineProbe, pool_threads) == 16 && offsetof(EngineProbe, pool) == 64 &&
                  sizeof(EngineProbe::Word) == 64,
              "web/src/probe.ts reads the engine's words at these offsets");

// Passes reads through and tells the reporter which bytes arrived.
class ReportingSource final : public WeightSource {
 public:
  ReportingSource(std::unique_ptr<WeightSource> inner, ProgressReporter& progress)
      : inner_(std::move(inner)), progress_(progress) {}

  uint64_t size() const override { return inner_->size(); }
  std::string describe() const override { return inner_->describe(); }

  void read(uint64_t offset, void* dst, size_t length) override {
    inner_->read(offset, dst, length);
    progress_.covered(offset, length);
  }

  // Forwarded, not left to the one-by-one default: the inner source may
  // make these reads side by side.
  void read_many(const std::vector<ReadRequest>& requests) override {
    inner_->read_many(requests);
    for (const ReadRequest& r : requests) progress_.covered(r.offset, r.length);
  }

  void header_done() override { inner_->header_done(); }
  int parallel_reads() const override { return inner_->parallel_reads(); }

 private:
  std::unique_ptr<WeightSource> inner_;
  ProgressReporter& progress_;
};

// The network and cache counters of a split model's parts, summed: each
// part's source reports its own, from whichever thread reads it. Shared by
// the parts' callbacks, which live as long as the sources.
class PartCounters : public std::enable_shared_from_this<PartCounters> {
 public:
  explicit PartCounters(ProgressReporter& progress) : progress_(progress) {}

  // The callback for the next part opened.
  std::function<void(uint64_t, uint64_t, uint64_t)> next_part() {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t part = counts_.size();
    counts_.emplace_back(0, 0);
    return [self = shared_from_this(), part](uint64_t fetched, uint64_t from_cache, uint64_t) {
      self->update(part, fetched, from_cache);
    };
  }

 private:
  void update(size_t part, uint64_t fetched, uint64_t from_cache) {
    std::lock_guard<std::mutex> lock(mutex_);
    counts_[part] = {fetched, from_cache};
    uint64_t all_fetched = 0, all_from_cache = 0;
    for (const auto& [f, c] : counts_) {
      all_fetched += f;
      all_from_cache += c;
    }
    progress_.counts(all_fetched, all_from_cache);
  }

  ProgressReporter& progress_;
  std::mutex mutex_;
  std::vector<std::pair<uint64_t, uint64_t>> counts_;  // per part: fetched, from the cache
};

HttpSourceStats sum_stats(const std::vector<HttpSource*>& sources) {
  HttpSourceStats sum;
  sum.opened_from_cache = sum.caching = !sources.empty();
  for (const HttpSource* source : sources) {
    const HttpSourceStats s = source->stats();
    sum.requests += s.requests;
    sum.retries += s.retries;
    sum.bytes_fetched += s.bytes_fetched;
    sum.bytes_from_cache += s.bytes_from_cache;
    sum.opened_from_cache = sum.opened_from_cache && s.opened_from_cache;
    sum.whole_file = sum.whole_file || s.whole_file;
    sum.caching = sum.caching && s.caching;
    if (sum.cache_error.empty()) sum.cache_error = s.cache_error;
  }
  return sum;
}

// The single-thread build has no threads to give the engine.
EngineOptions adapt_to_build(EngineOptions options) {
#if !SIPLLM_WASM_THREADS
  options.threads = 1;
  options.loader.mode = LoaderMode::kSync;
#endif
  return options;
}

}  // namespace

// ---- ProgressReporter ----------------------------------------------------------

void ProgressReporter::begin(uint64_t total, bool header) {
  std::lock_guard<std::mutex> lock(mutex_);
  ranges_.clear();
  covered_ = sent_covered_ = 0;
  sent_fetched_ = sent_from_cache_ = 0;
  sent_header_ = !header;  // the first flush always sends
  total_ = total;
  step_ = std::max(kMinProgressStep, total / kProgressEventsPerFile);
  header_ = header;
}

void ProgressReporter::set_header(bool header) {
  std::lock_guard<std::mutex> lock(mutex_);
  header_ = header;
}

void ProgressReporter::covered(uint64_t offset, uint64_t length) {
  if (length == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t begin = offset;
  uint64_t end = offset + length;
  auto it = ranges_.upper_bound(begin);
  if (it != ranges_.begin() && std::prev(it)->second >= begin) --it;
  while (it != ranges_.end() && it->first <= end) {
    begin = std::min(begin, it->first);
    end = std::max(end, it->second);
    covered_ -= it->second - it->first;
    it = ranges_.erase(it);
  }
  ranges_.emplace(begin, end);
  covered_ += end - begin;
  if (covered_ >= sent_covered_ + step_ || (covered_ == total_ && sent_covered_ != total_)) {
    send_locked();
  }
}

void ProgressReporter::counts(uint64_t fetched, uint64_t from_cache) {
  std::lock_guard<std::mutex> lock(mutex_);
  fetched_ = fetched;
  from_cache_ = from_cache;
}

void ProgressReporter::flush() {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool changed = covered_ != sent_covered_ || fetched_ != sent_fetched_ ||
                       from_cache_ != sent_from_cache_ || header_ != sent_header_;
  if (total_ > 0 && changed) send_locked();
}

void ProgressReporter::send_locked() {
  sent_covered_ = covered_;
  sent_fetched_ = fetched_;
  sent_from_cache_ = from_cache_;
  sent_header_ = header_;
  post_progress(session_id_, covered_, fetched_, from_cache_, total_, header_);
}

// ---- JobThread -------------------------------------------------------------------

JobThread::~JobThread() { stop(); }

#if SIPLLM_WASM_THREADS

void JobThread::post(std::function<void()> job) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return;
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  jobs_.push_back(std::move(job));
  changed_.notify_all();
}

void JobThread::loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (stopping_) {
        exited_ = 1;
        emscripten_futex_wake(&exited_, INT_MAX);
        return;
      }
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    if (held_ != 0) {
      std::atomic<int32_t>* state = held_state_;
      if (state != nullptr) state->store(SessionProbe::kHeld);
      while (held_ != 0) emscripten_futex_wait(&held_, 1, 100);
    }
    job();
  }
}

void JobThread::hold(bool held, std::atomic<int32_t>* state) {
  held_state_ = state;
  held_ = held ? 1 : 0;
  if (!held) emscripten_futex_wake(&held_, INT_MAX);
}

void JobThread::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    jobs_.clear();
  }
  changed_.notify_all();
  if (!thread_.joinable()) return;
  // The running job may need the main runtime thread to answer its calls
  // (a cache store's): waiting there, answer them until the loop returns.
  if (emscripten_is_main_runtime_thread()) {
    while (exited_ == 0) emscripten_futex_wait(&exited_, 0, 10);
  }
  thread_.join();
}

#else

void JobThread::post(std::function<void()> job) { job(); }
void JobThread::stop() {}
void JobThread::hold(bool, std::atomic<int32_t>*) {
  throw Error(ErrorKind::kUnsupported, "the single-thread build runs its jobs inline: they cannot be held");
}

#endif

// ---- Session -----------------------------------------------------------------------

Session::Session(int id) : id_(id), progress_(id) {
  probe_.session_id = id;
  probe_.engine.pulse = &Session::pulse;
  probe_.engine.pulse_context = this;
}

void Session::pulse(void* context) {
  Session& session = *static_cast<Session*>(context);
  const double now = emscripten_get_now();
  double sent = session.alive_sent_ms_.load();
  if (now - sent >= kAlivePeriodMs && session.alive_sent_ms_.compare_exchange_strong(sent, now)) {
    post_alive(session.id_);
  }
}

void Session::hold_jobs(bool held) { jobs_.hold(held, &probe_.job_state); }

void Session::hold_engine_lock(double milliseconds) {
  std::lock_guard<std::mutex> lock(engine_mutex_);
  std::atomic<int32_t> never{0};
  const double end = emscripten_get_now() + milliseconds;
  while (emscripten_get_now() < end) emscripten_futex_wait(&never, 0, 1);
}

Session::~Session() {
  cancel();
  if (transport_ != nullptr) transport_->abort();
  jobs_.stop();
  engine_.reset();
}

void Session::start_job(SessionProbe::Job kind, std::function<void(JobResult&)> work) {
  bool idle = false;
  if (!busy_.compare_exchange_strong(idle, true)) {
    throw Error(ErrorKind::kInvalidArgument, "the model is busy with another request");
  }
  probe_.job_cancelled = 0;
  probe_.job = kind;
  probe_.job_state = SessionProbe::kQueued;
  jobs_.post([this, work = std::move(work)] {
    probe_.job_state = SessionProbe::kRunning;
    JobResult result;
    try {
      // Cancelled while it waited for the job thread: the engine would not
      // know (a cancel before its call is forgotten when the call starts).
      if (probe_.job_cancelled != 0) throw Error(ErrorKind::kAborted, "the request was cancelled before it started");
      work(result);
    } catch (const Error& e) {
      result.ok = false;
      result.error_kind = error_kind_name(e.kind());
      result.error_message = e.what();
    } catch (const std::bad_alloc&) {
      result.ok = false;
      result.error_kind = error_kind_name(ErrorKind::kOutOfBudget);
      result.error_message =
          "out of memory: the WebAssembly heap could not grow (it is limited to 4 GiB); "
          "set a smaller memoryBudget";
    } catch (const std::exception& e) {
      result.ok = false;
      result.error_kind = "internal";
      result.error_message = e.what();
    }
    progress_.flush();
    {
      std::lock_guard<std::mutex> lock(events_mutex_);
      result_ = std::move(result);
    }
    probe_.job_state = SessionProbe::kIdle;
    probe_.job = SessionProbe::kNoJob;
    busy_ = false;
    probe_.jobs_done.fetch_add(1);
    post_job_done(id_);
  });
}

void Session::open_source(std::unique_ptr<WeightSource> source, const EngineOptions& options) {
  progress_.begin(source->size(), true);
  auto reporting = std::make_unique<ReportingSource>(std::move(source), progress_);
  EngineOptions engine_options = adapt_to_build(options);
  engine_options.probe = &probe_.engine;
  std::unique_ptr<Engine> engine = Engine::open(std::move(reporting), engine_options);
  progress_.set_header(false);
  std::lock_guard<std::mutex> lock(engine_mutex_);
  engine_ = std::move(engine);
}

void Session::open_url(const std::string& url, const OpenOptions& options) {
  if (engine_ != nullptr) throw Error(ErrorKind::kInvalidArgument, "this session already has a model");
  const std::shared_ptr<HttpTransport> transport = make_js_transport(&probe_.http, &probe_.engine);
  transport_ = transport;
  start_job(SessionProbe::kOpen, [this, url, options, transport](JobResult&) {
    HttpSourceOptions http = options.http;
    http.whole_file_budget = options.engine.loader.memory_budget;
#if !SIPLLM_WASM_THREADS
    http.parallel_requests = 1;
#endif
    if (options.cache_store_id != 0) http.cache = make_js_store(options.cache_store_id);
    // A split model's parts: each its own source and cache entry.
    const auto counters = std::make_shared<PartCounters>(progress_);
    std::vector<HttpSource*> parts;
    const auto open_part = [&](const std::string& part_url) -> std::unique_ptr<WeightSource> {
      HttpSourceOptions part_options = http;
      part_options.on_progress = counters->next_part();
      std::unique_ptr<HttpSource> part = open_http_source(part_url, transport, part_options);
      parts.push_back(part.get());
      return part;
    };
    // The weights start coming as soon as their offsets are known: a model
    // loaded from a URL is loaded to be used (and the warm-up that follows
    // the load would start the same loads a little later).
    EngineOptions engine = options.engine;
    engine.loader.prefetch_on_open = true;
    open_source(open_split_model(open_part(url), url, open_part), engine);
    std::lock_guard<std::mutex> lock(engine_mutex_);
    http_sources_ = std::move(parts);
  });
}

void Session::open_bytes(int bytes_id, uint64_t size, const std::string& name,
                         const OpenOptions& options) {
  if (engine_ != nullptr) throw Error(ErrorKind::kInvalidArgument, "this session already has a model");
  start_job(SessionProbe::kOpen, [this, bytes_id, size, name, options](JobResult&) {
    open_source(make_js_bytes_source(bytes_id, size, name), options.engine);
  });
}

GenerationStats Session::run_generation(
    const std::function<GenerationStats(const Engine::TokenCallback&)>& run) {
  tokens_generated_ = 0;
  const GenerationStats stats = run([this](const TokenEvent& event) {
    if (event.token >= 0) ++tokens_generated_;
    // A cancel that came between the job's start and the engine's call: the
    // engine forgot it, this stops the generation at its first token.
    if (probe_.job_cancelled != 0 && probe_.engine.cancelled == 0) engine_->cancel();
    bool post = false;
    {
      std::lock_guard<std::mutex> lock(events_mutex_);
      tokens_.push_back(event);
      post = !tokens_posted_;
      tokens_posted_ = true;
    }
    if (post) post_tokens_ready(id_);
    return true;
  });
  last_generation_ = stats;
  return stats;
}

void Session::generate(const std::string& prompt, const GenerateOptions& options) {
  idle_engine();
  start_job(SessionProbe::kGenerate, [this, prompt, options](JobResult& result) {
    result.stats = run_generation(
        [&](const Engine::TokenCallback& on_token) { return engine_->generate(prompt, options, on_token); });
  });
}

void Session::generate_tokens(const std::vector<int32_t>& prompt, const GenerateOptions& options) {
  idle_engine();
  start_job(SessionProbe::kGenerate, [this, prompt, options](JobResult& result) {
    result.stats = run_generation([&](const Engine::TokenCallback& on_token) {
      return engine_->generate_tokens(prompt, options, on_token);
    });
  });
}

void Session::embed(const std::vector<std::string>& texts, const EmbedOptions& options) {
  idle_engine();
  start_job(SessionProbe::kEmbed, [this, texts, options](JobResult& result) {
    Embeddings out;
    out.vectors = engine_->embed(texts, options);
    for (const std::string& text : texts) {
      out.tokens += static_cast<int>(engine_->tokenize(text, options.add_special).size());
    }
    result.embeddings = std::move(out);
  });
}

void Session::warm_up(double milliseconds) {
  idle_engine();
  start_job(SessionProbe::kWarmUp, [this, milliseconds](JobResult&) { engine_->warm_up(milliseconds); });
}

std::vector<TokenEvent> Session::take_tokens() {
  std::lock_guard<std::mutex> lock(events_mutex_);
  std::vector<TokenEvent> out;
  out.swap(tokens_);
  tokens_posted_ = false;
  return out;
}

JobResult Session::take_result() {
  std::lock_guard<std::mutex> lock(events_mutex_);
  return std::exchange(result_, JobResult{});
}

void Session::end_warm_up() {
  std::lock_guard<std::mutex> lock(engine_mutex_);
  if (engine_ != nullptr) engine_->end_warm_up();
}

int Session::cancel() {
  std::lock_guard<std::mutex> lock(engine_mutex_);
  if (busy_) probe_.job_cancelled = 1;
  const int generated = tokens_generated_;
  if (engine_ != nullptr) engine_->cancel();
  return generated;
}

const Engine& Session::idle_engine() const {
  if (busy_) throw Error(ErrorKind::kInvalidArgument, "the model is busy with another request");
  if (engine_ == nullptr) throw Error(ErrorKind::kInvalidArgument, "no model is open");
  return *engine_;
}

Engine& Session::idle_engine() {
  return const_cast<Engine&>(static_cast<const Session*>(this)->idle_engine());
}

const ModelInfo& Session::info() const { return idle_engine().info(); }

std::vector<int32_t> Session::tokenize(const std::string& text, bool add_special,
                                       bool parse_special) const {
  return idle_engine().tokenize(text, add_special, parse_special);
}

std::string Session::detokenize(const std::vector<int32_t>& tokens) const {
  return idle_engine().detokenize(tokens);
}

void Session::reset() { idle_engine().reset(); }

LoaderStats Session::loader_stats() const { return idle_engine().loader_stats(); }

LoaderStats Session::live_loader_stats() const {
  std::lock_guard<std::mutex> lock(engine_mutex_);
  return engine_ != nullptr ? engine_->loader_stats() : LoaderStats{};
}

size_t Session::kv_cache_bytes() const { return idle_engine().kv_cache_bytes(); }

std::optional<HttpSourceStats> Session::source_stats() const {
  idle_engine();
  if (http_sources_.empty()) return std::nullopt;
  return sum_stats(http_sources_);
}

void Session::close() {
  cancel();
  if (transport_ != nullptr) transport_->abort();
  // Held through a shared slot the job empties: std::function may copy the
  // job (libc++ copies a small callable where it moves one), and a copy on
  // this thread that went last would free the engine here.
  const auto engine = std::make_shared<std::unique_ptr<Engine>>();
  {
    std::lock_guard<std::mutex> lock(engine_mutex_);
    http_sources_.clear();
    *engine = std::move(engine_);
  }
  // After the running job, which the cancel and the abort end soon. Inline
  // in the single-thread build.
  jobs_.post([this, engine, id = id_] {
    probe_.job = SessionProbe::kClose;
    probe_.job_state = SessionProbe::kRunning;
    engine->reset();
    probe_.job_state = SessionProbe::kIdle;
    post_closed(id);
  });
}

}  // namespace sipllm::wasm
