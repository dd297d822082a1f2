// One open model as the JavaScript side sees it: the Engine, the thread its
// requests run on, and the events they send back.
//
// Requests that read weights (open, generate) are jobs: in the threaded build
// they run on a thread the session owns, so that the main runtime thread stays
// free to answer the proxied I/O of the engine's threads (js_host.h) and to
// take a cancel at any moment; in the single-thread build they run inline. A
// job reports its tokens and its end as events (post_tokens_ready,
// post_job_done); JavaScript then collects them with take_tokens() and
// take_result(). Everything else (info, tokenize, stats, ...) is answered at
// once, and only between jobs.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "js_host.h"
#include "sipllm/engine.h"
#include "sipllm/engine_probe.h"
#include "sipllm/http_source.h"

namespace sipllm::wasm {

// What a session is doing, kept in words the page reads straight from the
// shared memory by offset (web/src/probe.ts), so that it can say what every
// thread of a stuck worker waits on. The session's own words come first; the
// engine's (sipllm/engine_probe.h) and the transport's follow.
struct SessionProbe {
  enum Job : int32_t { kNoJob = 0, kOpen = 1, kGenerate = 2, kEmbed = 3, kWarmUp = 4, kClose = 5 };
  enum JobState : int32_t {
    kIdle = 0,     // no job
    kQueued = 1,   // posted; the job thread has not started it
    kRunning = 2,  // in the engine
    kHeld = 3,     // held before it started (a test's hook: Session::hold_jobs)
  };
  std::atomic<int32_t> job{kNoJob};
  std::atomic<int32_t> job_state{kIdle};
  // The page cancelled the job: it stops, whether or not the engine has
  // started it yet (the engine forgets a cancel that comes before its call).
  std::atomic<int32_t> job_cancelled{0};
  std::atomic<int32_t> session_id{0};
  TransportProbe http;
  std::atomic<int32_t> jobs_done{0};  // "done" events posted (the worker counts those it handled)
  EngineProbe engine;
};

// What an open needs besides the model's location.
struct OpenOptions {
  EngineOptions engine;
  HttpSourceOptions http;       // cache and on_progress are set by the session
  int cache_store_id = 0;       // a store registered in JavaScript; 0: no cache
};

// What an embed job computed: one vector per text, and the tokens the texts
// took (for the caller's usage figures).
struct Embeddings {
  std::vector<std::vector<float>> vectors;
  int tokens = 0;
};

// How a job ended.
struct JobError {
  std::string kind;  // error_kind_name(), or "internal"
  std::string message;
};

struct JobResult {
  bool ok = true;
  std::string error_kind;  // error_kind_name(), or "internal"
  std::string error_message;
  std::optional<JobError> error() const {
    if (ok) return std::nullopt;
    return JobError{error_kind, error_message};
  }
  std::optional<GenerationStats> stats;  // set by a generate job
  std::optional<Embeddings> embeddings;  // set by an embed job
};

// Progress of the bytes a model has delivered to the engine: distinct bytes
// (each counted once, however often it is read again), and the HTTP source's
// own counters (bytes from the network and from the cache, counted per read).
// Sent as events, at most every `step` new bytes and at the end of each job.
class ProgressReporter {
 public:
  explicit ProgressReporter(int session_id) : session_id_(session_id) {}

  void begin(uint64_t total, bool header);
  void set_header(bool header);
  void covered(uint64_t offset, uint64_t length);
  void counts(uint64_t fetched, uint64_t from_cache);
  void flush();

 private:
  void send_locked();

  const int session_id_;
  std::mutex mutex_;
  std::map<uint64_t, uint64_t> ranges_;  // start -> end of disjoint covered ranges
  uint64_t covered_ = 0, total_ = 0, step_ = 1, sent_covered_ = 0;
  uint64_t fetched_ = 0, from_cache_ = 0, sent_fetched_ = 0, sent_from_cache_ = 0;
  bool header_ = false, sent_header_ = false;
};

// Runs jobs one after another: on its own thread in the threaded build,
// inline (in post) in the single-thread build.
class JobThread {
 public:
  JobThread() = default;
  ~JobThread();
  JobThread(const JobThread&) = delete;
  JobThread& operator=(const JobThread&) = delete;

  void post(std::function<void()> job);
  void stop();  // finishes the running job, drops queued ones, joins
  // While held, no job starts; `state` (when given) says so meanwhile.
  void hold(bool held, std::atomic<int32_t>* state = nullptr);

 private:
#if SIPLLM_WASM_THREADS
  void loop();
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::atomic<int32_t> exited_{0};  // the loop has returned
  std::atomic<int32_t> held_{0};
  std::atomic<int32_t>* held_state_ = nullptr;
  std::thread thread_;
#endif
};

class Session {
 public:
  // `id` names the session in the events sent to JavaScript.
  explicit Session(int id);
  // Meant for a closed session (close(), then its "closed" event); frees a
  // model still open on this thread.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Where the probe is in the WebAssembly memory; see SessionProbe.
  const SessionProbe& probe() const { return probe_; }
  // For tests of the page's watchdog and of forced interleavings: while
  // held, the job thread starts no job (the threaded build only).
  void hold_jobs(bool held);
  // For a test of forced interleavings: the calling thread holds the lock
  // that guards the engine for `milliseconds`, waiting meanwhile as a thread
  // waits for a contended lock (the main runtime thread runs queued calls).
  void hold_engine_lock(double milliseconds);

  // Jobs. Each throws Error(kInvalidArgument) when a job is still running.
  void open_url(const std::string& url, const OpenOptions& options);
  void open_bytes(int bytes_id, uint64_t size, const std::string& name, const OpenOptions& options);
  void generate(const std::string& prompt, const GenerateOptions& options);
  void generate_tokens(const std::vector<int32_t>& prompt, const GenerateOptions& options);
  // Engine::embed as a job: it reads the weights like a generation.
  void embed(const std::vector<std::string>& texts, const EmbedOptions& options);
  // Engine::warm_up as a job: the loader starts on the first pass meanwhile.
  void warm_up(double milliseconds);
  // From any thread: a running warm-up stops; the loader goes on.
  void end_warm_up();

  std::vector<TokenEvent> take_tokens();
  JobResult take_result();  // the last finished job's result
  bool busy() const { return busy_; }
  // From any thread, at any time. Returns how many tokens the running
  // generation had produced when the engine was told.
  int cancel();

  // Between jobs, on an open model.
  const ModelInfo& info() const;
  std::vector<int32_t> tokenize(const std::string& text, bool add_special, bool parse_special) const;
  std::string detokenize(const std::vector<int32_t>& tokens) const;
  void reset();
  LoaderStats loader_stats() const;
  // From any thread, at any time, also while a job runs: the loader's
  // counters as they stand (empty before a model is open).
  LoaderStats live_loader_stats() const;
  size_t kv_cache_bytes() const;
  std::optional<HttpSourceStats> source_stats() const;
  std::optional<GenerationStats> last_generation() const { return last_generation_; }

  // Cancels the running job, abandons its requests and frees the model
  // after it, on the job thread; posts the "closed" event (post_closed) when
  // done. Returns at once: the main runtime thread must not wait for the
  // model's threads, since a thread another thread starts is started by the
  // main runtime thread's event loop (Emscripten's pthread_create), and
  // freeing the model joins such threads.
  void close();

 private:
  void start_job(SessionProbe::Job kind, std::function<void(JobResult&)> work);
  // The engine's pulse (EngineProbe::pulse): an "alive" event at most every
  // kAlivePeriodMs.
  static void pulse(void* session);
  void open_source(std::unique_ptr<WeightSource> source, const EngineOptions& options);
  GenerationStats run_generation(const std::function<GenerationStats(const Engine::TokenCallback&)>& run);
  const Engine& idle_engine() const;
  Engine& idle_engine();

  const int id_;
  SessionProbe probe_;
  std::atomic<double> alive_sent_ms_{0};
  ProgressReporter progress_;

  mutable std::mutex engine_mutex_;  // guards the engine_ pointer against cancel()
  std::unique_ptr<Engine> engine_;
  // Inside engine_'s source, when opened from a URL: one, or one per part of
  // a split model.
  std::vector<HttpSource*> http_sources_;
  // The transport of a URL's source, set on the main runtime thread when the
  // open starts: close() aborts its requests, also those of a running open.
  std::shared_ptr<HttpTransport> transport_;
  std::optional<GenerationStats> last_generation_;

  std::atomic<bool> busy_{false};
  std::mutex events_mutex_;
  std::vector<TokenEvent> tokens_;
  bool tokens_posted_ = false;
  std::atomic<int> tokens_generated_{0};  // by the running generation
  JobResult result_;

  JobThread jobs_;  // last: joined before anything it uses goes away
};

}  // namespace sipllm::wasm
