// The HTTP range source against a real server: scripts/range-server.mjs, run
// with Node on localhost, serving real model files, with its fault modes.
// The server counts requests and bytes; the tests read those counts.
#include <curl/curl.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "model/gguf.h"
#include "io/http/page_cache.h"
#include "io/http/range_response.h"
#include "sipllm/engine.h"
#include "sipllm/error.h"
#include "sipllm/gguf_split.h"
#include "sipllm/http_source.h"
#include "test_support.h"

extern char** environ;

namespace sipllm {
namespace {

namespace fs = std::filesystem;

std::string range_server_script() { return std::string(SIPLLM_SOURCE_DIR) + "/scripts/range-server.mjs"; }

std::string make_temp_dir(const std::string& tag) {
  std::string pattern = (fs::temp_directory_path() / ("sipllm-" + tag + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
  return pattern;
}

size_t collect(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

// One GET or POST to the server's control endpoints.
std::string control_request(const std::string& url, bool post) {
  CURL* curl = curl_easy_init();
  std::string body;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  if (post) curl_easy_setopt(curl, CURLOPT_POSTFIELDS, "");
  const CURLcode code = curl_easy_perform(curl);
  curl_easy_cleanup(curl);
  if (code != CURLE_OK) throw std::runtime_error(url + ": " + curl_easy_strerror(code));
  return body;
}

struct ServedRequest {
  std::string method, url, range;
  int status = 0;
  uint64_t bytes = 0;
};

struct ServerStats {
  uint64_t requests = 0;
  uint64_t bytes = 0;
  std::vector<ServedRequest> log;
};

// node scripts/range-server.mjs --root DIR --port 0, for the life of the object.
class RangeServer {
 public:
  explicit RangeServer(const std::string& root) {
    // stdout: the line with the port. stdin: a lifeline; the server exits
    // when this process closes it, or dies, so it never outlives the tests.
    int out[2];
    int lifeline[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(lifeline, O_CLOEXEC) != 0) {
      throw std::runtime_error("pipe failed");
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, lifeline[0], STDIN_FILENO);
    const std::string script = range_server_script();
    std::vector<std::string> args = {"node", script, "--root", root, "--port", "0",
                                     "--exit-on-stdin-close"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int spawned = posix_spawnp(&pid_, "node", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    ::close(lifeline[0]);
    lifeline_ = lifeline[1];
    if (spawned != 0) {
      ::close(out[0]);
      throw std::runtime_error("cannot start node (is Node.js installed?): " +
                               std::string(std::strerror(spawned)));
    }
    FILE* stream = ::fdopen(out[0], "r");
    char line[256] = "";
    const bool got = std::fgets(line, sizeof line, stream) != nullptr;
    std::fclose(stream);  // the server writes nothing else to stdout
    const char* port = got ? std::strstr(line, "\"port\":") : nullptr;
    if (port == nullptr) {
      stop();
      throw std::runtime_error("range server did not report its port (got '" + std::string(line) + "')");
    }
    port_ = std::atoi(port + 7);
  }
  ~RangeServer() { stop(); }
  RangeServer(const RangeServer&) = delete;
  RangeServer& operator=(const RangeServer&) = delete;

  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

  void reset() const { control_request(url("/__reset"), true); }

  ServerStats stats() const {
    std::istringstream text(control_request(url("/__stats?format=text"), false));
    ServerStats s;
    std::string key;
    text >> key >> s.requests >> key >> s.bytes;
    ServedRequest r;
    while (text >> r.method >> r.url >> r.range >> r.status >> r.bytes) s.log.push_back(r);
    return s;
  }

 private:
  void stop() {
    if (lifeline_ >= 0) ::close(lifeline_);
    lifeline_ = -1;
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  pid_t pid_ = -1;
  int lifeline_ = -1;
  int port_ = 0;
};

// What the file backend produces: the reference for every HTTP load.
struct Reference {
  std::vector<int32_t> prompt;
  std::string text;
  std::vector<float> logits;
};

constexpr int kGreedyTokens = 24;
const char* const kPrompt = "Once upon a time, there was a little girl named Lily.";

Reference run_model(std::unique_ptr<WeightSource> source, const EngineOptions& options = {}) {
  auto engine = Engine::open(std::move(source), options);
  Reference r;
  r.prompt = engine->tokenize(kPrompt);
  r.logits = engine->evaluate(r.prompt, /*all_positions=*/true);
  engine->reset();
  r.text = test::generate_text(*engine, r.prompt, test::greedy(kGreedyTokens));
  return r;
}

// The same over HTTP, keeping the source's counters from before the engine
// (which owns the source) is gone.
Reference run_http(std::unique_ptr<HttpSource> source, HttpSourceStats* stats,
                   const EngineOptions& options = {}) {
  HttpSource* http = source.get();
  auto engine = Engine::open(std::move(source), options);
  Reference r;
  r.prompt = engine->tokenize(kPrompt);
  r.logits = engine->evaluate(r.prompt, /*all_positions=*/true);
  engine->reset();
  r.text = test::generate_text(*engine, r.prompt, test::greedy(kGreedyTokens));
  *stats = http->stats();
  return r;
}

void expect_same_as(const Reference& got, const Reference& want) {
  EXPECT_EQ(got.prompt, want.prompt);
  EXPECT_EQ(got.text, want.text);
  ASSERT_EQ(got.logits.size(), want.logits.size());
  EXPECT_EQ(std::memcmp(got.logits.data(), want.logits.data(), want.logits.size() * sizeof(float)), 0)
      << "logits over HTTP differ from the file backend's";
}

// Fixture: one server for the suite, over a folder holding stories260K and a
// generated multi-MiB model; a fresh cache folder per test.
class HttpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new std::string(make_temp_dir("http-root"));
    fs::copy_file(test::model_path("stories260K.gguf"), *root_ + "/stories260K.gguf");
    fs::copy_file(test::model_path("llama.cpp-vocab/ggml-vocab-deepseek-llm.gguf"),
                  *root_ + "/vocab-deepseek-llm.gguf");
    test::random_llama_writer("kquant-small", TensorType::kQ8_0, 11).write_file(*root_ + "/multi.gguf");
    // Split sets of stories260K: in three parts; in two, each with a 4.5 GiB
    // hole (sparse) before its tensors; and a set missing its second part.
    write_split_model(*open_file_source(*root_ + "/stories260K.gguf"), *root_ + "/stories", 3);
    write_split_model(*open_file_source(*root_ + "/stories260K.gguf"), *root_ + "/far", 2,
                      (4ull << 30) + (512ull << 20));
    write_split_model(*open_file_source(*root_ + "/stories260K.gguf"), *root_ + "/lonely", 2);
    fs::remove(*root_ + "/lonely-00002-of-00002.gguf");
    server_ = new RangeServer(*root_);
    stories_ = new Reference(run_model(open_file_source(*root_ + "/stories260K.gguf")));
    multi_ = new Reference(run_model(open_file_source(*root_ + "/multi.gguf")));
  }
  static void TearDownTestSuite() {
    delete server_;
    delete stories_;
    delete multi_;
    fs::remove_all(*root_);
    delete root_;
  }

  void SetUp() override {
    cache_dir_ = make_temp_dir("http-cache");
    server_->reset();
  }
  void TearDown() override { fs::remove_all(cache_dir_); }

  static uint64_t file_size(const std::string& name) { return fs::file_size(*root_ + "/" + name); }

  static HttpSourceOptions fast_options() {
    HttpSourceOptions options;
    options.backoff_ms = 1;  // retries are counted, never timed
    return options;
  }

  std::shared_ptr<CacheStore> cache() const { return make_directory_cache(cache_dir_); }

  static std::string* root_;
  static RangeServer* server_;
  static Reference* stories_;
  static Reference* multi_;
  std::string cache_dir_;
};

std::string* HttpTest::root_ = nullptr;
RangeServer* HttpTest::server_ = nullptr;
Reference* HttpTest::stories_ = nullptr;
Reference* HttpTest::multi_ = nullptr;

// ---- Same bytes, same logits --------------------------------------------------

TEST_F(HttpTest, HttpStreamingMatchesFileBackendBitForBit) {
  struct Case {
    int parallel;
    LoaderMode mode;
    bool cached;
  };
  for (const Case& c : {Case{1, LoaderMode::kSync, false}, Case{4, LoaderMode::kRing, false},
                        Case{4, LoaderMode::kRing, true}}) {
    SCOPED_TRACE("parallel " + std::to_string(c.parallel) + (c.cached ? ", cached" : ""));
    HttpSourceOptions options = fast_options();
    options.parallel_requests = c.parallel;
    if (c.cached) options.cache = cache();
    EngineOptions engine;
    engine.loader.mode = c.mode;
    for (const auto& [name, reference] : {std::make_pair("stories260K.gguf", stories_),
                                          std::make_pair("multi.gguf", multi_)}) {
      SCOPED_TRACE(name);
      auto source = open_http_source(server_->url(std::string("/") + name), make_curl_transport(), options);
      EXPECT_EQ(source->size(), file_size(name));
      expect_same_as(run_model(std::move(source), engine), *reference);
    }
  }
}

TEST_F(HttpTest, HttpStreamsUnderAZeroBudgetWithTheCacheAsStorage) {
  // Nothing resident: every block streams on every pass, from the cache's
  // pages once they are stored.
  HttpSourceOptions options = fast_options();
  options.cache = cache();
  EngineOptions engine;
  engine.loader.memory_budget = 0;
  expect_same_as(run_model(open_http_source(server_->url("/multi.gguf"), make_curl_transport(), options),
                           engine),
                 *multi_);
  EXPECT_EQ(server_->stats().bytes, file_size("multi.gguf")) << "each page fetched once";
}

TEST_F(HttpTest, HttpHeaderTakesOneOrTwoRanges) {
  // stories260K's header is within the first range: the open is one request.
  EngineOptions sync;
  sync.loader.mode = LoaderMode::kSync;  // no prefetch thread reading ahead
  auto engine = Engine::open(open_http_source(server_->url("/stories260K.gguf"), make_curl_transport(),
                                              fast_options()),
                             sync);
  EXPECT_EQ(server_->stats().requests, 1u);

  // A 100k-token vocabulary: a header of about 4 MB takes two more ranges
  // (the head doubles: 1, 2, then 4 MiB).
  server_->reset();
  auto source = open_http_source(server_->url("/vocab-deepseek-llm.gguf"), make_curl_transport(),
                                 fast_options());
  const GgufFile over_http = GgufFile::parse(*source);
  EXPECT_EQ(server_->stats().requests, 3u);
  auto file = open_file_source(*root_ + "/vocab-deepseek-llm.gguf");
  const GgufFile local = GgufFile::parse(*file);
  ASSERT_NE(over_http.find_array("tokenizer.ggml.tokens", GgufType::kString), nullptr);
  EXPECT_EQ(over_http.find_array("tokenizer.ggml.tokens", GgufType::kString)->strings,
            local.find_array("tokenizer.ggml.tokens", GgufType::kString)->strings);
  EXPECT_EQ(over_http.metadata().size(), local.metadata().size());
}

TEST_F(HttpTest, HttpLargeReadsAreSplitIntoParallelRanges) {
  HttpSourceOptions options = fast_options();
  options.parallel_requests = 4;
  auto source = open_http_source(server_->url("/multi.gguf"), make_curl_transport(), options);
  server_->reset();
  // Past the head, so the read is planned afresh: 8 MiB in 4 requests of 2 MiB.
  ASSERT_GE(file_size("multi.gguf"), 16u << 20);
  std::vector<uint8_t> got(8u << 20);
  source->read(8u << 20, got.data(), got.size());
  const ServerStats s = server_->stats();
  ASSERT_EQ(s.requests, 4u);
  for (const ServedRequest& r : s.log) EXPECT_EQ(r.bytes, 2u << 20) << r.range;
  std::vector<uint8_t> want(got.size());
  open_file_source(*root_ + "/multi.gguf")->read(8u << 20, want.data(), want.size());
  EXPECT_EQ(got, want);
}

TEST_F(HttpTest, HttpScatteredSmallReadsCloseTogetherShareARequest) {
  // The embedding rows of a prompt: reads close together come in one
  // request, far ones in their own, and each lands where it was asked.
  auto source = open_http_source(server_->url("/multi.gguf"), make_curl_transport(), fast_options());
  server_->reset();
  const uint64_t far = 12u << 20;
  const std::vector<uint64_t> offsets = {(4u << 20) + 9000, 4u << 20, (4u << 20) + 200000, far, far + 100};
  std::vector<std::vector<uint8_t>> got(offsets.size(), std::vector<uint8_t>(612));
  std::vector<WeightSource::ReadRequest> reads;
  for (size_t i = 0; i < offsets.size(); ++i) reads.push_back({offsets[i], got[i].data(), got[i].size()});
  source->read_many(reads);
  EXPECT_EQ(server_->stats().requests, 2u);
  auto file = open_file_source(*root_ + "/multi.gguf");
  for (size_t i = 0; i < offsets.size(); ++i) {
    std::vector<uint8_t> want(612);
    file->read(offsets[i], want.data(), want.size());
    EXPECT_EQ(got[i], want) << "read at " << offsets[i];
  }
}

TEST_F(HttpTest, HttpRowsAreCachedByTheRowNotByThePage) {
  // Rows of a table read by the row, with a cache of 1 MiB pages: the first
  // load fetches the rows' bytes alone (a page around each would be 1 MiB a
  // row), the cache keeps exactly those, and a second load reads them from
  // it without a request; a row not seen yet is fetched alone again.
  HttpSourceOptions options = fast_options();
  options.cache = cache();
  const std::string url = server_->url("/multi.gguf");
  const uint64_t row = 5040;
  const std::vector<uint64_t> offsets = {(3u << 20) + 17, (6u << 20) + 333, (6u << 20) + 333 + row,
                                         (9u << 20) + 4096};
  auto file = open_file_source(*root_ + "/multi.gguf");
  auto read_rows = [&](WeightSource& source, const std::vector<uint64_t>& at) {
    std::vector<std::vector<uint8_t>> got(at.size(), std::vector<uint8_t>(row));
    std::vector<WeightSource::ReadRequest> reads;
    for (size_t i = 0; i < at.size(); ++i) reads.push_back({at[i], got[i].data(), got[i].size()});
    source.read_many(reads);
    for (size_t i = 0; i < at.size(); ++i) {
      std::vector<uint8_t> want(row);
      file->read(at[i], want.data(), want.size());
      EXPECT_EQ(got[i], want) << "row at " << at[i];
    }
  };
  {
    auto source = open_http_source(url, make_curl_transport(), options);
    server_->reset();
    read_rows(*source, offsets);
    EXPECT_EQ(server_->stats().bytes, 4 * row) << "the rows' bytes, no more";
    EXPECT_EQ(server_->stats().requests, 3u) << "two rows side by side share one";
  }
  std::vector<CachedModel> cached = list_cached_models(*options.cache);
  ASSERT_EQ(cached.size(), 1u);
  EXPECT_EQ(cached[0].cached_bytes, (1u << 20) + 4 * row) << "the head's page and the rows";

  server_->reset();
  auto again = open_http_source(url, make_curl_transport(), options);
  read_rows(*again, offsets);
  EXPECT_EQ(server_->stats().requests, 0u);
  EXPECT_EQ(again->stats().bytes_from_cache, 4 * row);
  // A row half stored (its first bytes are the last row's end) and a new one.
  read_rows(*again, {(6u << 20) + 333 + row + row / 2, (12u << 20) + 1});
  EXPECT_EQ(server_->stats().requests, 2u);
  EXPECT_EQ(server_->stats().bytes, 2 * row);
  // Pages stored later over the rows: reads still give the file's bytes.
  std::vector<uint8_t> page(1u << 20), want(1u << 20);
  again->read(6u << 20, page.data(), page.size());
  file->read(6u << 20, want.data(), want.size());
  EXPECT_EQ(page, want);
  read_rows(*again, offsets);
}

TEST_F(HttpTest, HttpProgressIsMonotonicAndCountsCacheReads) {
  for (bool second : {false, true}) {
    std::vector<std::array<uint64_t, 3>> events;
    HttpSourceOptions options = fast_options();
    options.cache = cache();
    options.on_progress = [&](uint64_t fetched, uint64_t from_cache, uint64_t total) {
      events.push_back({fetched, from_cache, total});
    };
    run_model(open_http_source(server_->url("/stories260K.gguf"), make_curl_transport(), options));
    ASSERT_FALSE(events.empty());
    for (size_t i = 1; i < events.size(); ++i) {
      EXPECT_GE(events[i][0], events[i - 1][0]);
      EXPECT_GE(events[i][1], events[i - 1][1]);
    }
    for (const auto& e : events) EXPECT_EQ(e[2], file_size("stories260K.gguf"));
    if (second) {
      EXPECT_EQ(events.back()[0], 0u) << "a cached model fetches nothing";
      EXPECT_GE(events.back()[1], file_size("stories260K.gguf") - 14176) << "weights from the cache";
    } else {
      EXPECT_EQ(events.back()[0], file_size("stories260K.gguf"));
    }
  }
}

// ---- The cache tier -----------------------------------------------------------

TEST_F(HttpTest, HttpSecondLoadFromCacheSendsNoRequests) {
  HttpSourceOptions options = fast_options();
  options.cache = cache();
  const std::string url = server_->url("/multi.gguf");
  expect_same_as(run_model(open_http_source(url, make_curl_transport(), options)), *multi_);
  EXPECT_GT(server_->stats().requests, 0u);
  EXPECT_EQ(server_->stats().bytes, file_size("multi.gguf"));

  server_->reset();
  HttpSourceStats s;
  expect_same_as(run_http(open_http_source(url, make_curl_transport(), options), &s), *multi_);
  EXPECT_EQ(server_->stats().requests, 0u);
  EXPECT_TRUE(s.opened_from_cache);
  EXPECT_EQ(s.requests, 0u);
  EXPECT_EQ(s.bytes_fetched, 0u);
  EXPECT_GT(s.bytes_from_cache, 0u);
}

// A split model over HTTP: each part a URL of its own, each cached as its
// own entry; the second load comes from the cache without a request.
std::unique_ptr<WeightSource> open_http_split(const std::string& first, const HttpSourceOptions& options) {
  auto transport = make_curl_transport();
  const auto open = [&](const std::string& url) -> std::unique_ptr<WeightSource> {
    return open_http_source(url, transport, options);
  };
  return open_split_model(open(first), first, open);
}

TEST_F(HttpTest, HttpSplitModelMatchesTheUnsplitFileAndCachesEachPart) {
  HttpSourceOptions options = fast_options();
  options.cache = cache();
  const std::string first = server_->url("/stories-00001-of-00003.gguf");
  expect_same_as(run_model(open_http_split(first, options)), *stories_);
  std::vector<CachedModel> cached = list_cached_models(*options.cache);
  ASSERT_EQ(cached.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    const std::string url = server_->url("/" + split_part_name("stories", k, 3));
    const bool listed = std::any_of(cached.begin(), cached.end(), [&](const CachedModel& m) {
      return m.url == url && m.size == file_size(split_part_name("stories", k, 3));
    });
    EXPECT_TRUE(listed) << url;
  }
  server_->reset();
  EngineOptions streamed;
  streamed.loader.memory_budget = 0;
  expect_same_as(run_model(open_http_split(first, options), streamed), *stories_);
  EXPECT_EQ(server_->stats().requests, 0u) << "every part from the cache";
}

TEST_F(HttpTest, HttpSplitModelMissingPartIsNamed) {
  const std::string first = server_->url("/lonely-00001-of-00002.gguf");
  const Error e = test::expect_error([&] { open_http_split(first, fast_options()); });
  EXPECT_EQ(e.kind(), ErrorKind::kNetwork);
  const std::string second = server_->url("/lonely-00002-of-00002.gguf");
  EXPECT_EQ(std::string(e.what()),
            second + " (part 2 of 2 of a split model): " + second + " bytes 0-1048575: HTTP 404");
}

TEST_F(HttpTest, HttpTensorsPast4GiBAreFetchedAndCached) {
  // Both parts hold their tensors past 4.5 GiB: range requests, the cache's
  // pages and the combined address space (past 9 GiB) all go beyond 32 bits.
  HttpSourceOptions options = fast_options();
  options.cache = cache();
  const std::string first = server_->url("/far-00001-of-00002.gguf");
  const auto asked_past_4GiB = [](const ServerStats& stats) {
    for (const ServedRequest& r : stats.log) {
      const size_t eq = r.range.find('=');
      if (eq != std::string::npos && std::strtoull(r.range.c_str() + eq + 1, nullptr, 10) > (4ull << 30)) return true;
    }
    return false;
  };
  expect_same_as(run_model(open_http_split(first, options)), *stories_);
  EXPECT_TRUE(asked_past_4GiB(server_->stats()));
  server_->reset();
  expect_same_as(run_model(open_http_split(first, options)), *stories_);
  // (A load the cache serves reads nothing ahead: not the unused gap either.)
  EXPECT_FALSE(asked_past_4GiB(server_->stats())) << "the pages past 4 GiB came from the cache";
}

TEST_F(HttpTest, HttpInterruptedDownloadResumesWithOnlyMissingPages) {
  // The first response that covers the middle of the file is cut there, and
  // without retries the load fails: the download is interrupted mid-stream.
  const std::string url = server_->url("/fault/drop-once/multi.gguf");
  const uint64_t size = file_size("multi.gguf");
  HttpSourceOptions options = fast_options();
  options.cache = cache();
  options.max_retries = 0;
  options.parallel_requests = 1;  // no readahead, which would absorb the cut
  const Error e = test::expect_error([&] { run_model(open_http_source(url, make_curl_transport(), options)); });
  EXPECT_EQ(e.kind(), ErrorKind::kNetwork) << e.what();
  EXPECT_NE(std::string(e.what()).find(url + " bytes "), std::string::npos) << e.what();

  auto models = list_cached_models(*options.cache);
  ASSERT_EQ(models.size(), 1u);
  const uint64_t cached = models[0].cached_bytes;
  EXPECT_TRUE(cached % (1u << 20) == 0 || cached % (1u << 20) == size % (1u << 20))
      << "whole pages (the last one is short)";
  EXPECT_GT(cached, 0u);
  EXPECT_LT(cached, size);

  // The reload reads the index (no request) and fetches exactly the rest.
  // (The server is not reset: its cut happens once.)
  const ServerStats before = server_->stats();
  options.parallel_requests = 4;
  HttpSourceStats stats;
  expect_same_as(run_http(open_http_source(url, make_curl_transport(), options), &stats), *multi_);
  const ServerStats after = server_->stats();
  EXPECT_TRUE(stats.opened_from_cache);
  EXPECT_EQ(stats.retries, 0u);
  EXPECT_GT(after.requests, before.requests);
  EXPECT_EQ(after.bytes - before.bytes, size - cached) << "only the missing pages are fetched";
  EXPECT_EQ(stats.bytes_fetched, size - cached);
  for (size_t i = before.log.size(); i < after.log.size(); ++i) {
    EXPECT_EQ(after.log[i].status, 206) << after.log[i].range;
  }
  models = list_cached_models(*options.cache);
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0].cached_bytes, size);
}

// A store that works until it has taken `quota` bytes, then throws as a full
// disk or a browser quota does.
class QuotaStore final : public CacheStore {
 public:
  QuotaStore(std::shared_ptr<CacheStore> inner, uint64_t quota) : inner_(std::move(inner)), quota_(quota) {}
  bool read(const std::string& name, uint64_t offset, void* dst, size_t length) override {
    return inner_->read(name, offset, dst, length);
  }
  void write(const std::string& name, uint64_t offset, const void* src, size_t length) override {
    if (written_ + length > quota_) {
      ++refused_;
      throw Error(ErrorKind::kIo, name + ": quota exceeded");
    }
    written_ += length;
    inner_->write(name, offset, src, length);
  }
  std::vector<std::pair<std::string, uint64_t>> list() override { return inner_->list(); }
  void remove(const std::string& name) override { inner_->remove(name); }
  std::atomic<int> refused_{0};

 private:
  std::shared_ptr<CacheStore> inner_;
  uint64_t quota_;
  std::atomic<uint64_t> written_{0};
};

TEST_F(HttpTest, HttpQuotaErrorFallsBackToStreamingWithoutCache) {
  for (uint64_t quota : {uint64_t{0}, uint64_t{3} << 20}) {
    SCOPED_TRACE("quota " + std::to_string(quota));
    auto store = std::make_shared<QuotaStore>(cache(), quota);
    HttpSourceOptions options = fast_options();
    options.cache = store;
    EngineOptions engine;
    engine.loader.memory_budget = 0;  // streams every pass: the cache would be read on every token
    HttpSourceStats s;
    expect_same_as(
        run_http(open_http_source(server_->url("/multi.gguf"), make_curl_transport(), options), &s, engine),
        *multi_);
    EXPECT_FALSE(s.caching);
    EXPECT_NE(s.cache_error.find("quota exceeded"), std::string::npos) << s.cache_error;
    // One failure turns caching off; only writes already under way when it
    // happened (one per request in flight) can fail after it.
    EXPECT_GE(store->refused_, 1);
    EXPECT_LE(store->refused_, options.parallel_requests);
    EXPECT_GT(s.bytes_fetched, file_size("multi.gguf")) << "streamed again on later passes";
    // Whatever was stored before the quota ran out is listed, and is correct.
    for (const CachedModel& m : list_cached_models(*store)) EXPECT_LT(m.cached_bytes, m.size);
  }
}

TEST_F(HttpTest, HttpListsAndDeletesCachedModels) {
  auto store = cache();
  HttpSourceOptions options = fast_options();
  options.cache = store;
  EXPECT_TRUE(list_cached_models(*store).empty());
  const std::string stories = server_->url("/stories260K.gguf");
  const std::string multi = server_->url("/multi.gguf");
  run_model(open_http_source(stories, make_curl_transport(), options));
  {
    // Only the header of the second model (no prefetch thread): partly cached.
    EngineOptions sync;
    sync.loader.mode = LoaderMode::kSync;
    auto engine = Engine::open(open_http_source(multi, make_curl_transport(), options), sync);
  }
  std::vector<CachedModel> models = list_cached_models(*store);
  ASSERT_EQ(models.size(), 2u);
  const CachedModel& m = models[0].url == multi ? models[0] : models[1];
  const CachedModel& s = models[0].url == stories ? models[0] : models[1];
  EXPECT_EQ(s.url, stories);
  EXPECT_EQ(s.size, file_size("stories260K.gguf"));
  EXPECT_EQ(s.cached_bytes, s.size);
  EXPECT_FALSE(s.etag.empty());
  EXPECT_FALSE(s.last_modified.empty());
  EXPECT_EQ(m.url, multi);
  EXPECT_EQ(m.size, file_size("multi.gguf"));
  EXPECT_GT(m.cached_bytes, 0u);
  EXPECT_LT(m.cached_bytes, m.size);

  delete_cached_model(*store, stories);
  models = list_cached_models(*store);
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0].url, multi);
  for (const auto& [name, bytes] : store->list()) {
    EXPECT_NE(name, cache_index_name(stories));
    EXPECT_NE(name, cache_pages_name(stories));
  }
  // Deleted means fetched again.
  server_->reset();
  run_model(open_http_source(stories, make_curl_transport(), options));
  EXPECT_EQ(server_->stats().bytes, file_size("stories260K.gguf"));
  delete_cached_model(*store, "http://127.0.0.1:1/never-cached.gguf");  // a no-op
  EXPECT_EQ(list_cached_models(*store).size(), 2u);
}

TEST_F(HttpTest, HttpChangedFileIsAnErrorAndDropsTheCacheEntry) {
  // The first response has the file's ETag, later ones another.
  const std::string url = server_->url("/fault/etag-change/stories260K.gguf");
  HttpSourceOptions options = fast_options();
  options.cache = cache();
  // One request at a time, so the change is met by the read under test and
  // not first by a readahead on another thread.
  options.parallel_requests = 1;
  const Error e = test::expect_error([&] { run_model(open_http_source(url, make_curl_transport(), options)); });
  EXPECT_EQ(e.kind(), ErrorKind::kNetwork);
  const std::string message = e.what();
  EXPECT_NE(message.find(url + " bytes 1048576-1185375"), std::string::npos) << message;
  EXPECT_NE(message.find("changed on the server"), std::string::npos) << message;
  EXPECT_NE(message.find("ETag was \""), std::string::npos) << message;
  EXPECT_NE(message.find("now \"changed-"), std::string::npos) << message;
  EXPECT_TRUE(list_cached_models(*options.cache).empty()) << "the stale entry is deleted";
}

// ---- Faults: each gives the typed error naming URL and range, or succeeds ------

TEST_F(HttpTest, HttpNotFoundFailsWithoutRetry) {
  const std::string url = server_->url("/fault/404/stories260K.gguf");
  const Error e = test::expect_error([&] { open_http_source(url, make_curl_transport(), fast_options()); });
  EXPECT_EQ(e.kind(), ErrorKind::kNetwork);
  EXPECT_STREQ(e.what(), (url + " bytes 0-1048575: HTTP 404").c_str());
  EXPECT_EQ(server_->stats().requests, 1u);

  const std::string missing = server_->url("/no-such-model.gguf");
  const Error e2 = test::expect_error([&] { open_http_source(missing, make_curl_transport(), fast_options()); });
  EXPECT_STREQ(e2.what(), (missing + " bytes 0-1048575: HTTP 404").c_str());
}

TEST_F(HttpTest, HttpServerIgnoringRangeIsRefusedOrLoadedWhole) {
  const std::string url = server_->url("/fault/ignore-range/stories260K.gguf");
  const Error e = test::expect_error([&] { open_http_source(url, make_curl_transport(), fast_options()); });
  EXPECT_EQ(e.kind(), ErrorKind::kNetwork);
  const std::string message = e.what();
  EXPECT_NE(message.find(url + " bytes 0-1048575: the server ignored the Range header"), std::string::npos)
      << message;
  EXPECT_NE(message.find("1185376 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("allow_whole_file"), std::string::npos) << message;

  for (bool cached : {false, true}) {
    SCOPED_TRACE(cached ? "with cache" : "no cache");
    server_->reset();
    HttpSourceOptions options = fast_options();
    options.allow_whole_file = true;
    if (cached) options.cache = cache();
    HttpSourceStats stats;
    expect_same_as(run_http(open_http_source(url, make_curl_transport(), options), &stats), *stories_);
    EXPECT_TRUE(stats.whole_file);
    const ServerStats s = server_->stats();
    EXPECT_EQ(s.requests, 2u) << "the probe, then the whole file once";
    for (const ServedRequest& r : s.log) EXPECT_EQ(r.status, 200);
    if (cached) {
      server_->reset();
      expect_same_as(run_model(open_http_source(url, make_curl_transport(), options)), *stories_);
      EXPECT_EQ(server_->stats().requests, 0u) << "a whole-file download is cached too";
    }
  }

  // A whole file beyond the budget is refused, naming both sizes, before any of it is fetched.
  server_->reset();
  HttpSourceOptions options = fast_options();
  options.allow_whole_file = true;
  options.whole_file_budget = 1185375;
  const Error over = test::expect_error([&] { open_http_source(url, make_curl_transport(), options); });
  EXPECT_EQ(over.kind(), ErrorKind::kOutOfBudget);
  EXPECT_NE(std::string(over.what()).find("the whole file (1185376 bytes) is more than the memory budget (1185375 bytes)"),
            std::string::npos) << over.what();
  EXPECT_EQ(server_->stats().requests, 1u) << "only the probe";
}

TEST_F(HttpTest, HttpTruncatedBodyGivesUpAfterRetries) {
  const std::string url = server_->url("/fault/truncated/stories260K.gguf");
  HttpSourceOptions options = fast_options();
  options.max_retries = 2;
  const Error e = test::expect_error([&] { open_http_source(url, make_curl_transport(), options); });
  EXPECT_EQ(e.kind(), ErrorKind::kNetwork);
  const std::string message = e.what();
  EXPECT_EQ(message.rfind(url + " bytes 0-1048575: ", 0), 0u) << message;
  EXPECT_NE(message.find("HTTP 206, 524288 of 1048576 bytes received"), std::string::npos) << message;
  EXPECT_NE(message.find("gave up after 3 attempts"), std::string::npos) << message;
  EXPECT_EQ(server_->stats().requests, 3u);
}

TEST_F(HttpTest, HttpDroppedConnectionIsRetried) {
  // Cut at the middle of the file: inside the first range.
  const std::string url = server_->url("/fault/drop-once/stories260K.gguf");
  HttpSourceStats stats;
  expect_same_as(run_http(open_http_source(url, make_curl_transport(), fast_options()), &stats), *stories_);
  EXPECT_EQ(stats.retries, 1u);
  const ServerStats s = server_->stats();
  ASSERT_GE(s.log.size(), 2u);
  EXPECT_LT(s.log[0].bytes, 1u << 20) << "the first answer was cut";
  EXPECT_EQ(s.log[1].range, s.log[0].range) << "and asked again";
}

TEST_F(HttpTest, HttpServerErrorOnceIsRetried) {
  const std::string url = server_->url("/fault/500-once/stories260K.gguf");
  HttpSourceStats stats;
  expect_same_as(run_http(open_http_source(url, make_curl_transport(), fast_options()), &stats), *stories_);
  EXPECT_EQ(stats.retries, 1u);
  const ServerStats s = server_->stats();
  ASSERT_GE(s.log.size(), 2u);
  EXPECT_EQ(s.log[0].status, 500);
  EXPECT_EQ(s.log[1].status, 206);
}

TEST_F(HttpTest, HttpUnavailableGivesUpAfterMaxRetries) {
  const std::string url = server_->url("/fault/503/stories260K.gguf");
  HttpSourceOptions options = fast_options();
  options.max_retries = 3;
  const Error e = test::expect_error([&] { open_http_source(url, make_curl_transport(), options); });
  EXPECT_EQ(e.kind(), ErrorKind::kNetwork);
  EXPECT_STREQ(e.what(), (url + " bytes 0-1048575: HTTP 503 (Retry-After: 1) (gave up after 4 attempts)").c_str());
  EXPECT_EQ(server_->stats().requests, 4u);
}

TEST_F(HttpTest, HttpWrongContentRangeIsRefused) {
  const std::string url = server_->url("/fault/bad-content-range/stories260K.gguf");
  const Error e = test::expect_error([&] { open_http_source(url, make_curl_transport(), fast_options()); });
  EXPECT_EQ(e.kind(), ErrorKind::kNetwork);
  EXPECT_STREQ(e.what(), (url + " bytes 0-1048575: Content-Range 'bytes 1-1048576/1185376' does not "
                                "match the bytes 0-1048575 asked for")
                             .c_str());
  EXPECT_EQ(server_->stats().requests, 1u) << "not retried";
}

TEST_F(HttpTest, HttpRedirectIsFollowed) {
  const std::string url = server_->url("/fault/redirect/stories260K.gguf");
  HttpSourceOptions options = fast_options();
  options.cache = cache();
  expect_same_as(run_model(open_http_source(url, make_curl_transport(), options)), *stories_);
  const ServerStats s = server_->stats();
  ASSERT_EQ(s.log.size(), 4u);
  EXPECT_EQ(s.log[0].status, 302);
  EXPECT_EQ(s.log[1].status, 206);
  EXPECT_EQ(s.log[1].url, "/stories260K.gguf");
  // Cached under the URL that was asked for, not the one redirected to.
  ASSERT_EQ(list_cached_models(*options.cache).size(), 1u);
  EXPECT_EQ(list_cached_models(*options.cache)[0].url, url);
}

TEST_F(HttpTest, HttpRefusesBadArguments) {
  HttpSourceOptions options;
  options.parallel_requests = 0;
  EXPECT_EQ(test::expect_error([&] { open_http_source(server_->url("/stories260K.gguf"), make_curl_transport(), options); })
                .kind(),
            ErrorKind::kInvalidArgument);
  EXPECT_EQ(test::expect_error([&] { open_http_source("http://host/a b.gguf", make_curl_transport()); }).kind(),
            ErrorKind::kInvalidArgument);
  const Error refused =
      test::expect_error([&] { open_http_source("http://127.0.0.1:1/x.gguf", make_curl_transport(), fast_options()); });
  EXPECT_EQ(refused.kind(), ErrorKind::kNetwork);
  EXPECT_EQ(std::string(refused.what()).rfind("http://127.0.0.1:1/x.gguf bytes 0-1048575: ", 0), 0u)
      << refused.what();
  EXPECT_EQ(test::expect_error([&] { open_http_source("ftp://127.0.0.1/x.gguf", make_curl_transport(), fast_options()); })
                .kind(),
            ErrorKind::kNetwork);
}

// ---- The fault matrix's faults, at the library's level ---------------------------

// Every page the cache's index lists holds the file's bytes at that offset.
// Returns how many bytes are listed.
uint64_t expect_cache_holds_only_file_bytes(CacheStore& store, const std::string& url,
                                            const std::string& file) {
  const std::optional<CacheIndex> index = load_cache_index(store, url);
  if (!index) return 0;
  auto source = open_file_source(file);
  EXPECT_EQ(index->file.size, source->size());
  for (uint64_t p = 0; p < index->page_count(); ++p) {
    if (!index->pages[p]) continue;
    const uint64_t length = index->page_length(p);
    std::vector<uint8_t> kept(length), want(length);
    EXPECT_TRUE(store.read(cache_pages_name(url), p * index->page_bytes, kept.data(), length)) << "page " << p;
    source->read(p * index->page_bytes, want.data(), length);
    EXPECT_EQ(kept, want) << "page " << p << " differs from the file";
  }
  return index->cached_bytes();
}

// The requests the server saw for each Range, in order of arrival.
std::map<std::string, std::vector<ServedRequest>> by_range(const ServerStats& s) {
  std::map<std::string, std::vector<ServedRequest>> ranges;
  for (const ServedRequest& r : s.log) ranges[r.range].push_back(r);
  return ranges;
}

TEST_F(HttpTest, HttpRetryAfterIsWaitedForThenTheRangeIsAskedAgain) {
  // Every range is refused once with 429 and "Retry-After: 1" (then as a date).
  for (const std::string fault : {"429:after=1", "429:after=1,date=1"}) {
    SCOPED_TRACE(fault);
    server_->reset();
    const std::string url = server_->url("/fault/" + fault + "/stories260K.gguf");
    HttpSourceOptions options = fast_options();
    options.cache = cache();
    HttpSourceStats stats;
    expect_same_as(run_http(open_http_source(url, make_curl_transport(), options), &stats), *stories_);
    EXPECT_GE(stats.retries, 1u);
    for (const auto& [range, requests] : by_range(server_->stats())) {
      ASSERT_EQ(requests.size(), 2u) << range;
      EXPECT_EQ(requests[0].status, 429) << range;
      EXPECT_EQ(requests[1].status, 206) << range;
    }
    EXPECT_EQ(expect_cache_holds_only_file_bytes(*options.cache, url, *root_ + "/stories260K.gguf"),
              file_size("stories260K.gguf"));
    delete_cached_model(*options.cache, url);
  }
}

TEST_F(HttpTest, HttpRetryAfterOverTheCapFailsAtOnceNamingTheWait) {
  const std::string url = server_->url("/fault/429:after=3600/stories260K.gguf");
  const Error e = test::expect_error([&] { open_http_source(url, make_curl_transport(), fast_options()); });
  EXPECT_EQ(e.kind(), ErrorKind::kNetwork);
  EXPECT_STREQ(e.what(), (url + " bytes 0-1048575: HTTP 429 (Retry-After: 3600): the server asks to wait "
                                "3600 s, longer than the 30 s allowed (max_retry_after_ms; 1 attempt)")
                             .c_str());
  EXPECT_EQ(server_->stats().requests, 1u);
}

TEST_F(HttpTest, HttpStalledServerEndsInAReadTimeoutError) {
  // Headers and 1000 bytes, then silence, on every attempt.
  const std::string url = server_->url("/fault/stall:after=1000/stories260K.gguf");
  HttpSourceOptions options = fast_options();
  options.read_timeout_ms = 300;
  options.max_retries = 1;
  options.cache = cache();
  const Error e = test::expect_error([&] { open_http_source(url, make_curl_transport(), options); });
  EXPECT_EQ(e.kind(), ErrorKind::kNetwork);
  EXPECT_STREQ(e.what(), (url + " bytes 0-1048575: no bytes for 300 ms (read timeout) (after HTTP 206, 1000 of "
                                "1048576 bytes received) (gave up after 2 attempts)")
                             .c_str());
  EXPECT_EQ(server_->stats().requests, 2u);
  EXPECT_TRUE(list_cached_models(*options.cache).empty()) << "nothing of a failed open is kept";
}

TEST_F(HttpTest, HttpTrickleSlowerThanTheReadTimeoutStillArrives) {
  // Each response's first 24 kB come at 20 kB/s: over a second per response,
  // with bytes every 100 ms, against a read timeout of 400 ms.
  const std::string url = server_->url("/fault/trickle:rate=20000,bytes=24000/stories260K.gguf");
  HttpSourceOptions options = fast_options();
  options.read_timeout_ms = 400;
  HttpSourceStats stats;
  expect_same_as(run_http(open_http_source(url, make_curl_transport(), options), &stats), *stories_);
  EXPECT_EQ(stats.retries, 0u);
}

TEST_F(HttpTest, HttpRedirectLoopIsRefusedWithoutRetries) {
  const std::string url = server_->url("/fault/redirect-loop/stories260K.gguf");
  const Error e = test::expect_error([&] { open_http_source(url, make_curl_transport(), fast_options()); });
  EXPECT_EQ(e.kind(), ErrorKind::kNetwork);
  const std::string message = e.what();
  EXPECT_EQ(message.rfind(url + " bytes 0-1048575: too many redirects (a redirect loop?)", 0), 0u) << message;
  const ServerStats s = server_->stats();
  EXPECT_EQ(s.requests, 11u) << "the first request and 10 redirects, once";
  for (const ServedRequest& r : s.log) EXPECT_EQ(r.status, 302);
}

TEST_F(HttpTest, HttpFileReplacedMidSessionFailsAndLeavesNothingStale) {
  // The first response is the file; later ones are another version of it.
  const std::string url = server_->url("/fault/replace/stories260K.gguf");
  HttpSourceOptions options = fast_options();
  options.cache = cache();
  options.page_bytes = 64u << 10;
  const Error e = test::expect_error([&] { run_model(open_http_source(url, make_curl_transport(), options)); });
  EXPECT_EQ(e.kind(), ErrorKind::kNetwork);
  const std::string message = e.what();
  EXPECT_NE(message.find("the file changed on the server: ETag was \""), std::string::npos) << message;
  EXPECT_NE(message.find("-replaced\""), std::string::npos) << message;
  EXPECT_NE(message.find("its cached copy was deleted"), std::string::npos) << message;
  EXPECT_TRUE(list_cached_models(*options.cache).empty());
  for (const auto& [name, bytes] : options.cache->list()) ADD_FAILURE() << "left in the cache: " << name;
}

TEST_F(HttpTest, HttpBurstsOfServerErrorsAreRetriedInOrder) {
  // Every range: 500, then 502, then the bytes.
  const std::string url = server_->url("/fault/5xx:times=2/stories260K.gguf");
  HttpSourceOptions options = fast_options();
  options.parallel_requests = 1;
  HttpSourceStats stats;
  expect_same_as(run_http(open_http_source(url, make_curl_transport(), options), &stats), *stories_);
  const auto ranges = by_range(server_->stats());
  EXPECT_EQ(stats.retries, 2 * ranges.size());
  for (const auto& [range, requests] : ranges) {
    ASSERT_EQ(requests.size(), 3u) << range;
    EXPECT_EQ(requests[0].status, 500);
    EXPECT_EQ(requests[1].status, 502);
    EXPECT_EQ(requests[2].status, 206);
  }
}

TEST_F(HttpTest, HttpCutBodiesAreRetriedAndNeverCached) {
  // The first two attempts of every range are cut at a random byte: reset
  // (drop) or closed cleanly (short). The third gets through. The file is
  // read in order, as the loader does, so readahead runs too.
  const std::string file = *root_ + "/multi.gguf";
  std::vector<uint8_t> want(file_size("multi.gguf"));
  open_file_source(file)->read(0, want.data(), want.size());
  for (const std::string fault : {"drop:times=2,seed=7", "short:times=2,seed=3"}) {
    SCOPED_TRACE(fault);
    server_->reset();
    const std::string url = server_->url("/fault/" + fault + "/multi.gguf");
    HttpSourceOptions options = fast_options();
    options.cache = cache();
    options.page_bytes = 256u << 10;
    auto source = open_http_source(url, make_curl_transport(), options);
    source->header_done();
    std::vector<uint8_t> got(want.size());
    for (uint64_t at = 0; at < got.size(); at += 3u << 20) {
      source->read(at, got.data() + at, std::min<uint64_t>(3u << 20, got.size() - at));
    }
    EXPECT_TRUE(got == want) << "the bytes read differ from the file";
    EXPECT_GE(source->stats().retries, 2u);
    source.reset();  // readahead still running ends here
    const auto ranges = by_range(server_->stats());
    for (const auto& [range, requests] : ranges) {
      ASSERT_EQ(requests.size(), 3u) << range;
      EXPECT_LT(requests[0].bytes, requests[2].bytes) << range;
    }
    EXPECT_EQ(expect_cache_holds_only_file_bytes(*options.cache, url, *root_ + "/multi.gguf"),
              file_size("multi.gguf"));
    delete_cached_model(*options.cache, url);
  }
}

// ---- The CLI ------------------------------------------------------------------

std::string run_command(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed");
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  const int status = ::pclose(pipe);
  if (status != 0) throw std::runtime_error(command + " failed (" + std::to_string(status) + "): " + out);
  return out;
}

TEST_F(HttpTest, HttpCliRunsAUrlAndCachesIt) {
  const std::string args = " -p 'Once upon a time' -n 20 --temp 0 2>/dev/null";
  const std::string cli = SIPLLM_CLI_PATH;
  const std::string from_file = run_command(cli + " run -m " + *root_ + "/stories260K.gguf" + args);
  const std::string url = server_->url("/stories260K.gguf");
  const std::string cached = " --cache-dir " + cache_dir_ + "/cli";
  EXPECT_EQ(run_command(cli + " run -m " + url + cached + args), from_file);
  EXPECT_GT(server_->stats().requests, 0u);
  server_->reset();
  EXPECT_EQ(run_command(cli + " run -m " + url + cached + args), from_file);
  EXPECT_EQ(server_->stats().requests, 0u);
  EXPECT_EQ(run_command(cli + " run -m " + url + " --no-cache" + args), from_file);
  EXPECT_GT(server_->stats().requests, 0u);
}

TEST_F(HttpTest, HttpCliRunsASplitModelByItsFirstPartsUrl) {
  // Two parts, each with its tensors past 4.5 GiB.
  const std::string args = " -p 'Once upon a time' -n 20 --temp 0 2>/dev/null";
  const std::string cli = SIPLLM_CLI_PATH;
  const std::string from_file = run_command(cli + " run -m " + *root_ + "/stories260K.gguf" + args);
  const std::string url = server_->url("/far-00001-of-00002.gguf");
  EXPECT_EQ(run_command(cli + " run -m " + url + " --cache-dir " + cache_dir_ + "/cli" + args), from_file);
  EXPECT_EQ(list_cached_models(*make_directory_cache(cache_dir_ + "/cli")).size(), 2u);
}

// ---- Response checks and the index format, without a server ---------------------

HttpRangeResponse response(int status, const std::string& content_range, uint64_t body,
                           const std::string& etag = "\"e\"") {
  HttpRangeResponse r;
  r.status = status;
  r.content_range = content_range;
  r.body_bytes = body;
  r.etag = etag;
  return r;
}

TEST(HttpRangeCheck, AcceptsOnlyTheAskedBytesOfTheKnownFile) {
  RemoteFile known{1000, "\"e\"", ""};
  EXPECT_EQ(check_range_response(response(206, "bytes 100-199/1000", 100), 100, 100, known).verdict,
            RangeVerdict::kOk);
  EXPECT_EQ(check_range_response(response(206, "bytes 101-200/1000", 100), 100, 100, known).verdict,
            RangeVerdict::kFail);
  EXPECT_EQ(check_range_response(response(206, "bytes 100-198/1000", 99), 100, 100, known).verdict,
            RangeVerdict::kFail);
  EXPECT_EQ(check_range_response(response(206, "bytes 100-199/1001", 100), 100, 100, known).verdict,
            RangeVerdict::kChanged);
  EXPECT_EQ(check_range_response(response(206, "bytes 100-199/1000", 100, "\"f\""), 100, 100, known).verdict,
            RangeVerdict::kChanged);
  EXPECT_EQ(check_range_response(response(206, "bytes 100-199/1000", 60), 100, 100, known).verdict,
            RangeVerdict::kRetry);
  EXPECT_EQ(check_range_response(response(206, "bytes 100-199/1000", 160), 100, 100, known).verdict,
            RangeVerdict::kFail);
  EXPECT_EQ(check_range_response(response(206, "", 100), 100, 100, known).verdict, RangeVerdict::kFail);
  EXPECT_EQ(check_range_response(response(206, "bytes 100-199/*", 100), 100, 100, known).verdict,
            RangeVerdict::kOk);
  EXPECT_EQ(check_range_response(response(200, "", 1000), 100, 100, known).verdict,
            RangeVerdict::kRangeIgnored);
  EXPECT_EQ(check_range_response(response(200, "", 1000), 0, 1000, known).verdict, RangeVerdict::kOk);
  EXPECT_EQ(check_range_response(response(503, "", 0), 0, 100, known).verdict, RangeVerdict::kRetry);
  EXPECT_EQ(check_range_response(response(403, "", 0), 0, 100, known).verdict, RangeVerdict::kFail);
  EXPECT_EQ(check_range_response(response(416, "bytes */1000", 0), 2000, 100, known).verdict,
            RangeVerdict::kFail);
  HttpRangeResponse reset;
  reset.error = "Connection reset by peer";
  EXPECT_EQ(check_range_response(reset, 0, 100, known).verdict, RangeVerdict::kRetry);

  // The first request learns the size; a file shorter than the range is whole.
  const RangeCheck first = check_range_response(response(206, "bytes 0-499/500", 500), 0, 1000, {});
  EXPECT_EQ(first.verdict, RangeVerdict::kOk);
  EXPECT_EQ(first.seen.size, 500u);
  EXPECT_EQ(first.body_length, 500u);
  EXPECT_EQ(check_range_response(response(206, "bytes 0-99/*", 100), 0, 100, {}).verdict,
            RangeVerdict::kFail);
}

TEST(HttpRangeCheck, ParsesContentRange) {
  uint64_t start = 0, end = 0, total = 0;
  EXPECT_TRUE(parse_content_range("bytes 0-1048575/1185376", &start, &end, &total));
  EXPECT_EQ(start, 0u);
  EXPECT_EQ(end, 1048575u);
  EXPECT_EQ(total, 1185376u);
  EXPECT_TRUE(parse_content_range("bytes 5-9/*", &start, &end, &total));
  EXPECT_EQ(total, 0u);
  for (const char* bad : {"", "bytes", "bytes 9-5/10", "bytes 0-10/10", "items 0-1/2", "bytes 0-1/2x",
                          "bytes -1/2", "bytes 0-99999999999999999999/1"}) {
    EXPECT_FALSE(parse_content_range(bad, &start, &end, &total)) << bad;
  }
}

TEST(HttpCacheIndex, RoundTripsAndRejectsDamage) {
  CacheIndex index;
  index.url = "https://example.org/m.gguf?download=true";
  index.file = {2500000, "W/\"abc def\"", "Wed, 21 Oct 2015 07:28:00 GMT"};
  index.page_bytes = 1u << 20;
  index.pages = {true, false, true};
  const std::string text = index.serialize();
  EXPECT_EQ(text.substr(0, 32), "sipllm-cache 1 " + std::string(13, '0') + std::to_string(text.size()) + "\n");
  const std::optional<CacheIndex> back = CacheIndex::parse(text + "trailing bytes of an older index");
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->url, index.url);
  EXPECT_EQ(back->file.size, index.file.size);
  EXPECT_EQ(back->file.etag, index.file.etag);
  EXPECT_EQ(back->file.last_modified, index.file.last_modified);
  EXPECT_EQ(back->pages, index.pages);
  EXPECT_EQ(back->cached_bytes(), (1u << 20) + (2500000 - (2u << 20)));

  EXPECT_FALSE(CacheIndex::parse(text.substr(0, text.size() - 1)).has_value());
  std::string wrong_count = text;
  wrong_count.replace(wrong_count.find("pages 101"), 9, "pages 1x1");
  EXPECT_FALSE(CacheIndex::parse(wrong_count).has_value());
  std::string wrong_size = text;
  wrong_size.replace(wrong_size.find("size 2500000"), 12, "size 9500000");
  EXPECT_FALSE(CacheIndex::parse(wrong_size).has_value()) << "page count no longer matches";
  EXPECT_NE(cache_index_name(index.url), cache_index_name(index.url + "x"));
}

TEST(HttpRangeCheck, ReadsRetryAfterAsSecondsOrADate) {
  const auto now = std::chrono::system_clock::from_time_t(784111777);  // Sun, 06 Nov 1994 08:49:37 GMT
  EXPECT_EQ(parse_retry_after("120", now), 120000);
  EXPECT_EQ(parse_retry_after(" 0 ", now), 0);
  EXPECT_EQ(parse_retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now), 10000);
  EXPECT_EQ(parse_retry_after("Sun, 06 Nov 1994 08:49:27 GMT", now), 0) << "a date past is now";
  EXPECT_EQ(parse_retry_after("Wed, 01 Mar 2000 00:00:00 GMT", now),
            (951868800.0 - 784111777.0) * 1000);
  for (const char* bad : {"", "soon", "-1", "1.5", "Sun, 06 Nov 1994 08:49:47 UTC", "Sun, 06 Foo 1994 08:49:47 GMT"}) {
    EXPECT_EQ(parse_retry_after(bad, now), -1) << bad;
  }

  RemoteFile known{1000, "\"e\"", ""};
  HttpRangeResponse busy = response(429, "", 0);
  busy.retry_after = "2";
  const RangeCheck check = check_range_response(busy, 0, 100, known);
  EXPECT_EQ(check.verdict, RangeVerdict::kRetry);
  EXPECT_EQ(check.retry_after_ms, 2000);
  EXPECT_EQ(check_range_response(response(429, "", 0), 0, 100, known).retry_after_ms, -1);

  HttpRangeResponse loop = response(302, "", 0);
  loop.error = "Maximum (10) redirects followed";
  loop.failure = HttpFailure::kTooManyRedirects;
  EXPECT_EQ(check_range_response(loop, 0, 100, known).verdict, RangeVerdict::kFail);
  HttpRangeResponse stalled = response(206, "bytes 0-99/1000", 10);
  stalled.error = "Callback aborted";
  stalled.failure = HttpFailure::kStalled;
  const RangeCheck stall = check_range_response(stalled, 0, 100, known, 1500);
  EXPECT_EQ(stall.verdict, RangeVerdict::kRetry);
  EXPECT_EQ(stall.problem, "no bytes for 1.5 s (read timeout) (after HTTP 206, 10 of 100 bytes received)");
}

}  // namespace
}  // namespace sipllm
