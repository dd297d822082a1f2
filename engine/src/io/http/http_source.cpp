// The HTTP range WeightSource: plans each read into range requests, serves
// what it can from the cache tier, and keeps the cache's pages and index.
//
// A read is served, in this order, from:
//   1. the whole file in memory (a server that ignored Range, when allowed);
//   2. the head: the first bytes, fetched by the open, grown while the GGUF
//      header is being read sequentially past its end;
//   3. the cache's pages (stored ones from the store, missing ones fetched
//      page-aligned and stored), when there is a cache;
//   4. otherwise the network, exactly the bytes asked for.
// Large fetches are split into up to parallel_requests requests in flight.
// With a cache and a pool, sequential reads (the loader streaming blocks in
// file order) also fetch ahead into the cache, so that a request is already
// in flight when the next read comes and the round trip is hidden.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>

#include "io/http/page_cache.h"
#include "io/http/range_fetcher.h"
#include "io/http/range_response.h"
#include "io/http/request_pool.h"
#include "sipllm/error.h"
#include "sipllm/http_source.h"

namespace sipllm {
namespace {

// The open asks for kHttpFirstRangeBytes (http_source.h). While the header
// is read past the head, the head doubles per request, up to
// kHttpMaxHeadBytes: a few requests for a large vocabulary, and little
// fetched past the header.
constexpr uint64_t kFirstRangeBytes = kHttpFirstRangeBytes;
constexpr uint64_t kHeadGrowth = 2;
constexpr uint64_t kMaxHeadBytes = kHttpMaxHeadBytes;
// Requests in flight for one read are at least this large. A browser spends
// milliseconds of CPU on every request (IPC between its processes, CORS, the
// body's data pipe): on two cores, pieces of 640 KiB held a 50 MB/s link to
// 37 MB/s in Chromium however many were in flight, pieces of 2 MiB and more
// filled it. Natively a request is cheap either way.
constexpr uint64_t kMinPieceBytes = 2u << 20;
// read_many() fetches reads this close together (the embedding rows of a
// prompt) in one request, up to kMaxMergedBytes: the bytes between them cost
// less link time than another request's round trip and a browser's
// per-request CPU.
constexpr uint64_t kMergeGapBytes = 256u << 10;
constexpr uint64_t kMaxMergedBytes = 4u << 20;
// A sequential read fetches at least this much past its end ahead of need.
constexpr uint64_t kMinReadaheadBytes = 4u << 20;
constexpr uint64_t kMinPageBytes = 4u << 10;
constexpr uint64_t kMaxPageBytes = 256u << 20;

uint64_t round_up(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// The part of [a, a + a_len) that is also in [b, b + b_len), copied from a
// buffer holding the first range to one holding the second.
void copy_overlap(const uint8_t* src, uint64_t src_offset, uint64_t src_length, uint8_t* dst,
                  uint64_t dst_offset, uint64_t dst_length) {
  const uint64_t begin = std::max(src_offset, dst_offset);
  const uint64_t end = std::min(src_offset + src_length, dst_offset + dst_length);
  if (begin >= end) return;
  std::memcpy(dst + (begin - dst_offset), src + (begin - src_offset), static_cast<size_t>(end - begin));
}

void check_url(const std::string& url) {
  if (url.empty()) throw Error(ErrorKind::kInvalidArgument, "empty model URL");
  for (unsigned char c : url) {
    if (c <= ' ' || c == 0x7f) {
      throw Error(ErrorKind::kInvalidArgument,
                  "model URL '" + url + "' contains a space or control character");
    }
  }
}

void check_options(const HttpSourceOptions& options) {
  if (options.parallel_requests < 1) {
    throw Error(ErrorKind::kInvalidArgument, "parallel_requests must be at least 1");
  }
  if (options.max_retries < 0) throw Error(ErrorKind::kInvalidArgument, "max_retries must be >= 0");
  if (!(options.backoff_ms >= 0)) throw Error(ErrorKind::kInvalidArgument, "backoff_ms must be >= 0");
  if (!(options.max_retry_after_ms >= 0)) {
    throw Error(ErrorKind::kInvalidArgument, "max_retry_after_ms must be >= 0");
  }
  // Not infinite either: a stalled server must end in an error.
  if (!(options.read_timeout_ms > 0) || !std::isfinite(options.read_timeout_ms)) {
    throw Error(ErrorKind::kInvalidArgument, "read_timeout_ms must be a positive number of ms");
  }
  if (options.page_bytes < kMinPageBytes || options.page_bytes > kMaxPageBytes) {
    throw Error(ErrorKind::kInvalidArgument,
                "page_bytes must be between " + std::to_string(kMinPageBytes) + " and " +
                    std::to_string(kMaxPageBytes));
  }
}

RetryPolicy retry_policy(const HttpSourceOptions& options) {
  RetryPolicy policy;
  policy.max_retries = options.max_retries;
  policy.backoff_ms = options.backoff_ms;
  policy.max_retry_after_ms = options.max_retry_after_ms;
  policy.read_timeout_ms = options.read_timeout_ms;
  return policy;
}

class HttpSourceImpl final : public HttpSource {
 public:
  HttpSourceImpl(const std::string& url, std::shared_ptr<HttpTransport> transport,
                 const HttpSourceOptions& options)
      : url_(url),
        options_(options),
        fetcher_(url, std::move(transport), retry_policy(options)) {
    if (options_.parallel_requests > 1) {
      // The calling thread makes one of the requests itself.
      pool_ = std::make_unique<RequestPool>(options_.parallel_requests - 1);
    }
    open();
  }

  ~HttpSourceImpl() override {
    // Readahead tasks use the cache and the fetcher: the pool goes first.
    pool_.reset();
  }

  uint64_t size() const override { return file_.size; }
  std::string describe() const override { return url_; }

  void read(uint64_t offset, void* dst, size_t length) override {
    if (offset > file_.size || length > file_.size - offset) {
      throw Error(ErrorKind::kIo, url_ + ": read of " + std::to_string(length) +
                                      " bytes at offset " + std::to_string(offset) +
                                      " runs past the end of the file (" +
                                      std::to_string(file_.size) + " bytes)");
    }
    if (length == 0) return;
    auto* out = static_cast<uint8_t*>(dst);
    if (whole_ready_) {
      std::memcpy(out, whole_.data() + offset, length);
      return;
    }
    try {
      if (read_head(offset, out, length)) return;
      if (cache_ != nullptr) {
        read_cached(offset, out, length);
      } else {
        read_direct(offset, out, length);
      }
    } catch (const RangeError& e) {
      if (e.verdict() != RangeVerdict::kRangeIgnored) throw;
      load_whole_file(e);
      std::memcpy(out, whole_.data() + offset, length);
    }
  }

  // Rows of a table read by the row: reads close together share a request.
  // With a cache, rows it holds come from the store, and the rest are
  // fetched exactly (never the page around them) and stored as ranges.
  void read_many(const std::vector<ReadRequest>& requests) override {
    for (const ReadRequest& r : requests) {
      if (r.offset > file_.size || r.length > file_.size - r.offset) read(r.offset, r.dst, r.length);  // names it
    }
    std::vector<ReadRequest> missing;
    const bool cached = cache_ != nullptr && !whole_ready_;
    for (const ReadRequest& r : requests) {
      if (r.length == 0) continue;
      if (cached && cache_->holds(r.offset, r.length) && cache_->read(r.offset, r.dst, r.length)) {
        report_progress(0, r.length);
      } else {
        missing.push_back(r);
      }
    }
    std::sort(missing.begin(), missing.end(),
              [](const ReadRequest& a, const ReadRequest& b) { return a.offset < b.offset; });
    // Runs of reads close together, as [first, last) indices into `missing`.
    std::vector<std::pair<size_t, size_t>> runs;
    uint64_t run_end = 0;
    for (size_t i = 0; i < missing.size(); ++i) {
      const ReadRequest& r = missing[i];
      if (!runs.empty() && r.offset <= run_end + kMergeGapBytes &&
          std::max(run_end, r.offset + r.length) - missing[runs.back().first].offset <= kMaxMergedBytes) {
        runs.back().second = i + 1;
        run_end = std::max(run_end, r.offset + r.length);
      } else {
        runs.emplace_back(i, i + 1);
        run_end = r.offset + r.length;
      }
    }
    std::vector<std::vector<uint8_t>> spans(runs.size());
    std::vector<std::function<void()>> tasks;
    tasks.reserve(runs.size());
    for (size_t k = 0; k < runs.size(); ++k) {
      tasks.emplace_back([this, &missing, &spans, k, first = runs[k].first, last = runs[k].second] {
        const uint64_t start = missing[first].offset;
        uint64_t end = start;
        for (size_t i = first; i < last; ++i) end = std::max(end, missing[i].offset + missing[i].length);
        std::vector<uint8_t>& span = spans[k];
        span.resize(static_cast<size_t>(end - start));
        read_rows(start, span.data(), span.size());
        for (size_t i = first; i < last; ++i) {
          std::memcpy(missing[i].dst, span.data() + (missing[i].offset - start), missing[i].length);
        }
      });
    }
    run(tasks);
    if (cache_ == nullptr || whole_ready_) return;
    std::vector<PageCache::Range> fetched;
    for (size_t k = 0; k < runs.size(); ++k) {
      fetched.push_back({missing[runs[k].first].offset, spans[k].data(), spans[k].size()});
    }
    cache_->store_ranges(fetched);
  }

  void header_done() override {
    std::lock_guard<std::mutex> lock(head_mutex_);
    header_phase_ = false;
    head_.clear();
    head_.shrink_to_fit();
  }

  // Every unit read waits on round trips: a second one in flight hides them.
  int parallel_reads() const override { return 2; }

  HttpSourceStats stats() const override {
    HttpSourceStats s;
    s.requests = fetcher_.requests();
    s.retries = fetcher_.retries();
    {
      std::lock_guard<std::mutex> lock(progress_mutex_);
      s.bytes_fetched = fetched_;
      s.bytes_from_cache = from_cache_;
    }
    s.opened_from_cache = opened_from_cache_;
    s.whole_file = whole_ready_;
    if (cache_ != nullptr) {
      s.caching = cache_->writing();
      s.cache_error = cache_->write_error();
    } else {
      s.cache_error = cache_refusal_;
    }
    return s;
  }

 private:
  // ---- Opening --------------------------------------------------------------

  void open() {
    if (options_.cache != nullptr) {
      if (std::optional<CacheIndex> index = load_cache_index(*options_.cache, url_)) {
        file_ = index->file;
        cache_ = std::make_unique<PageCache>(options_.cache, std::move(*index));
        opened_from_cache_ = true;
        return;
      }
    }
    const uint64_t first = std::max(kFirstRangeBytes, round_up(kFirstRangeBytes, options_.page_bytes));
    head_.resize(first);
    try {
      const RangeCheck check = fetcher_.fetch(0, first, head_.data(), RemoteFile{});
      file_ = check.seen;
      head_.resize(check.body_length);
    } catch (const RangeError& e) {
      if (e.verdict() != RangeVerdict::kRangeIgnored) throw;
      // Only the server's word tells the size; the whole-file request checks it.
      file_ = e.seen();
      head_.clear();
      load_whole_file(e);
      // The entry starts once the bytes are here: a refused or failed
      // download leaves no empty entry behind.
      if (options_.cache != nullptr) {
        start_cache_entry();
        store_pages(whole_.data(), 0, file_.size);
      }
      return;
    }
    header_phase_ = true;
    report_progress(head_.size(), 0);
    if (options_.cache != nullptr) {
      start_cache_entry();
      if (cache_ != nullptr) store_head_pages(0);
    }
  }

  void start_cache_entry() {
    // A file too large for the cache (or a server that states an absurd
    // size) streams without it.
    cache_refusal_ = cache_entry_refusal(url_, file_, options_.page_bytes);
    if (!cache_refusal_.empty()) return;
    cache_ = std::make_unique<PageCache>(options_.cache, url_, file_, options_.page_bytes);
  }

  // ---- The head ---------------------------------------------------------------

  // Serves reads inside the head, and grows it for a read that starts right
  // at its end: the GGUF reader refilling its buffer, header reading still
  // under way. The first read elsewhere ends the header phase and frees the
  // head. (The loader's reads start inside the head or past it; one that
  // started exactly at its end would only fetch ahead of need, never wrongly.)
  bool read_head(uint64_t offset, uint8_t* dst, size_t length) {
    std::lock_guard<std::mutex> lock(head_mutex_);
    if (!header_phase_) return false;
    const uint64_t head_end = head_.size();
    const uint64_t end = offset + length;
    if (end <= head_end) {
      std::memcpy(dst, head_.data() + offset, length);
      return true;
    }
    if (offset == head_end && round_up(end, kFirstRangeBytes) <= kMaxHeadBytes) {
      const uint64_t new_end = std::min(
          {file_.size, kMaxHeadBytes, std::max(round_up(end, kFirstRangeBytes), head_end * kHeadGrowth)});
      head_.resize(new_end);
      try {
        fetch_checked(head_end, new_end - head_end, head_.data() + head_end);
      } catch (...) {
        head_.resize(head_end);
        throw;
      }
      report_progress(new_end - head_end, 0);
      if (cache_ != nullptr) store_head_pages(head_end);
      std::memcpy(dst, head_.data() + offset, length);
      return true;
    }
    header_phase_ = false;
    head_.clear();
    head_.shrink_to_fit();
    return false;
  }

  // Stores the whole pages of the head from byte `from` on.
  void store_head_pages(uint64_t from) { store_pages(head_.data(), from, head_.size()); }

  // Stores the pages lying wholly in [from, end) of the file, whose bytes
  // `file_bytes` holds at their file offsets; pages stored already or being
  // fetched by a reader are left alone.
  void store_pages(const uint8_t* file_bytes, uint64_t from, uint64_t end) {
    const uint64_t page_bytes = cache_->page_bytes();
    std::vector<uint64_t> pages;
    for (uint64_t p = round_up(from, page_bytes) / page_bytes; p < cache_->page_count(); ++p) {
      if (p * page_bytes + cache_->page_length(p) > end) break;
      pages.push_back(p);
    }
    const std::vector<PageCache::PageState> states = cache_->claim(pages);
    for (size_t i = 0; i < pages.size();) {
      size_t j = i;
      while (j < pages.size() && states[j] == PageCache::PageState::kClaimed) ++j;
      if (j > i) cache_->finish(pages[i], j - i, file_bytes + pages[i] * page_bytes);
      i = std::max(j, i + 1);
    }
  }

  // ---- The whole file ---------------------------------------------------------

  void load_whole_file(const RangeError& cause) {
    std::lock_guard<std::mutex> lock(whole_mutex_);
    if (whole_ready_) return;
    if (!options_.allow_whole_file) throw cause;
    if (file_.size > std::numeric_limits<size_t>::max() / 2) {
      throw Error(ErrorKind::kOutOfBudget,
                  url_ + ": the whole file (" + std::to_string(file_.size) +
                      " bytes) does not fit in this build's memory, and the server cannot stream it");
    }
    if (file_.size > options_.whole_file_budget) {
      throw Error(ErrorKind::kOutOfBudget,
                  url_ + ": the whole file (" + std::to_string(file_.size) + " bytes) is more than the memory budget (" +
                      std::to_string(options_.whole_file_budget) +
                      " bytes) allows, and the server cannot stream it (it ignores Range)");
    }
    whole_.resize(static_cast<size_t>(file_.size));
    fetch_checked(0, file_.size, whole_.data());
    report_progress(file_.size, 0);
    if (cache_ != nullptr) store_pages(whole_.data(), 0, file_.size);
    whole_ready_ = true;
  }

  // ---- Network reads ------------------------------------------------------------

  // One request through the fetcher, checked against the file as opened. A
  // file that changed makes the cache entry stale: it is deleted.
  void fetch_checked(uint64_t offset, uint64_t length, uint8_t* dst) {
    try {
      fetcher_.fetch(offset, length, dst, file_);
    } catch (const RangeError& e) {
      if (e.verdict() == RangeVerdict::kChanged && cache_ != nullptr) {
        cache_->invalidate();
        throw RangeError(e.verdict(), e.seen(),
                         std::string(e.what()) + "; its cached copy was deleted, load it again");
      }
      throw;
    }
  }

  // [offset, offset + length) cut into up to parallel_requests pieces of at
  // least kMinPieceBytes, each a multiple of `align` but the last.
  std::vector<std::pair<uint64_t, uint64_t>> split(uint64_t offset, uint64_t length,
                                                   uint64_t align) const {
    const uint64_t min_piece = round_up(kMinPieceBytes, align);
    const uint64_t n = std::min<uint64_t>(static_cast<uint64_t>(options_.parallel_requests),
                                          std::max<uint64_t>(1, length / min_piece));
    const uint64_t piece = round_up((length + n - 1) / n, align);
    std::vector<std::pair<uint64_t, uint64_t>> pieces;
    for (uint64_t at = 0; at < length; at += piece) {
      pieces.emplace_back(offset + at, std::min(piece, length - at));
    }
    return pieces;
  }

  // Runs fetch tasks, several at once when there is a pool. Every task runs
  // (a task that sees `failed` set only releases what it holds), so claims
  // are always released; the first exception is rethrown.
  void run(const std::vector<std::function<void()>>& tasks) {
    if (tasks.empty()) return;
    if (pool_ != nullptr && tasks.size() > 1) {
      pool_->run_all(tasks);
      return;
    }
    std::exception_ptr error;
    for (const auto& task : tasks) {
      try {
        task();
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    if (error) std::rethrow_exception(error);
  }

  void read_direct(uint64_t offset, uint8_t* dst, size_t length) {
    std::vector<std::function<void()>> tasks;
    auto failed = std::make_shared<std::atomic<bool>>(false);
    for (const auto& [piece_offset, piece_length] : split(offset, length, 64u << 10)) {
      tasks.emplace_back([this, failed, dst, offset, piece_offset = piece_offset,
                          piece_length = piece_length] {
        if (*failed) return;
        try {
          fetch_checked(piece_offset, piece_length, dst + (piece_offset - offset));
        } catch (...) {
          *failed = true;
          throw;
        }
        report_progress(piece_length, 0);
      });
    }
    run(tasks);
  }

  // One span of rows: with a cache, exactly its bytes from the network (the
  // caller stores them as a range); without, as any read.
  void read_rows(uint64_t offset, uint8_t* dst, size_t length) {
    if (cache_ == nullptr || whole_ready_) {
      read(offset, dst, length);
      return;
    }
    try {
      if (read_head(offset, dst, length)) return;
      fetch_checked(offset, length, dst);
      report_progress(length, 0);
    } catch (const RangeError& e) {
      if (e.verdict() != RangeVerdict::kRangeIgnored) throw;
      load_whole_file(e);
      std::memcpy(dst, whole_.data() + offset, length);
    }
  }

  // Reads through the cache: stored pages from the store, missing ones from
  // the network (then stored), pages another reader is fetching after it is
  // done. Repeats until every page of the read has been delivered.
  void read_cached(uint64_t offset, uint8_t* dst, size_t length) {
    read_ahead_of(offset, length);
    const uint64_t page_bytes = cache_->page_bytes();
    std::vector<uint64_t> needed;
    for (uint64_t p = offset / page_bytes; p <= (offset + length - 1) / page_bytes; ++p) {
      needed.push_back(p);
    }
    auto page_start = [&](uint64_t p) { return p * page_bytes; };

    while (!needed.empty()) {
      const std::vector<PageCache::PageState> states = cache_->claim(needed);
      std::vector<uint64_t> still_needed;
      std::vector<uint64_t> busy;

      // Runs of consecutive pages in one state, as [first, count).
      std::vector<std::pair<uint64_t, uint64_t>> stored_runs, claimed_runs;
      for (size_t i = 0; i < needed.size(); ++i) {
        auto* runs = states[i] == PageCache::PageState::kStored    ? &stored_runs
                     : states[i] == PageCache::PageState::kClaimed ? &claimed_runs
                                                                   : nullptr;
        if (runs == nullptr) {
          busy.push_back(needed[i]);
          continue;
        }
        if (!runs->empty() && runs->back().first + runs->back().second == needed[i]) {
          ++runs->back().second;
        } else {
          runs->emplace_back(needed[i], 1);
        }
      }

      // The network first, so that its requests are in flight while the
      // store is read; claims are always ended by the tasks.
      std::vector<std::function<void()>> tasks;
      auto failed = std::make_shared<std::atomic<bool>>(false);
      for (const auto& [first, count] : claimed_runs) {
        const uint64_t run_offset = page_start(first);
        const uint64_t run_length =
            page_start(first + count - 1) + cache_->page_length(first + count - 1) - run_offset;
        for (const auto& [piece_offset, piece_length] : split(run_offset, run_length, page_bytes)) {
          tasks.emplace_back([this, failed, dst, offset, length, page_bytes,
                              piece_offset = piece_offset, piece_length = piece_length] {
            const uint64_t first_page = piece_offset / page_bytes;
            const uint64_t pages = (piece_length + page_bytes - 1) / page_bytes;
            if (*failed) {
              cache_->finish(first_page, pages, nullptr);
              return;
            }
            std::vector<uint8_t> bytes(piece_length);
            try {
              fetch_checked(piece_offset, piece_length, bytes.data());
            } catch (...) {
              *failed = true;
              cache_->finish(first_page, pages, nullptr);
              throw;
            }
            cache_->finish(first_page, pages, bytes.data());
            report_progress(piece_length, 0);
            copy_overlap(bytes.data(), piece_offset, piece_length, dst, offset, length);
          });
        }
      }
      run(tasks);

      for (const auto& [first, count] : stored_runs) {
        const uint64_t begin = std::max(offset, page_start(first));
        const uint64_t end = std::min<uint64_t>(
            offset + length, page_start(first + count - 1) + cache_->page_length(first + count - 1));
        if (cache_->read(begin, dst + (begin - offset), static_cast<size_t>(end - begin))) {
          report_progress(0, end - begin);
        } else {
          for (uint64_t p = first; p < first + count; ++p) still_needed.push_back(p);
        }
      }

      for (uint64_t p : busy) {
        // Stored by the other reader: the next round reads it. Otherwise this
        // reader now holds the claim, and fetches the page itself.
        if (cache_->wait_for(p)) {
          still_needed.push_back(p);
          continue;
        }
        const uint64_t page_length = cache_->page_length(p);
        std::vector<uint8_t> bytes(page_length);
        try {
          fetch_checked(page_start(p), page_length, bytes.data());
        } catch (...) {
          cache_->finish(p, 1, nullptr);
          throw;
        }
        cache_->finish(p, 1, bytes.data());
        report_progress(page_length, 0);
        copy_overlap(bytes.data(), page_start(p), page_length, dst, offset, length);
      }
      std::sort(still_needed.begin(), still_needed.end());
      needed = std::move(still_needed);
    }
  }

  // When [offset, offset + length) continues the previous read, fetches the
  // pages after it into the cache on a pool thread. The read itself then
  // finds them stored, or waits for them as for any page another reader is
  // fetching. A failed readahead only releases its pages: the read that
  // needs them fetches them itself and reports any error.
  void read_ahead_of(uint64_t offset, uint64_t length) {
    if (pool_ == nullptr || !cache_->writing()) return;
    const uint64_t end = offset + length;
    // Only a stream that comes from the network is read ahead: a read the
    // cache held (a load from a full cache reads its header so) would
    // otherwise fetch what no one reads, and a second load that asks for no
    // more than the first would still meet the network. A read inside the
    // last window keeps it going.
    const bool held = cache_->holds(offset, length);
    uint64_t ahead_begin = 0, ahead_end = 0;
    {
      std::lock_guard<std::mutex> lock(sequence_mutex_);
      const bool sequential = offset >= last_read_end_ && offset <= last_read_end_ + cache_->page_bytes();
      last_read_end_ = end;
      if (!sequential) return;
      if (held && !(offset >= readahead_begin_ && offset < readahead_end_)) return;
      ahead_begin = std::max(end, readahead_end_);
      ahead_end = std::min(file_.size, end + std::max(length, kMinReadaheadBytes));
      if (ahead_end <= ahead_begin) return;
      readahead_begin_ = ahead_begin;
      readahead_end_ = ahead_end;
    }
    pool_->post([this, ahead_begin, ahead_end] { fetch_ahead(ahead_begin, ahead_end); });
  }

  void fetch_ahead(uint64_t begin, uint64_t end) {
    const uint64_t page_bytes = cache_->page_bytes();
    std::vector<uint64_t> pages;
    for (uint64_t p = begin / page_bytes; p <= (end - 1) / page_bytes; ++p) pages.push_back(p);
    const std::vector<PageCache::PageState> states = cache_->claim(pages);
    bool failed = false;
    for (size_t i = 0; i < pages.size();) {
      if (states[i] != PageCache::PageState::kClaimed) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < pages.size() && states[j] == PageCache::PageState::kClaimed) ++j;
      const uint64_t run_offset = pages[i] * page_bytes;
      const uint64_t run_length = pages[j - 1] * page_bytes + cache_->page_length(pages[j - 1]) - run_offset;
      const uint64_t count = j - i;
      if (failed) {
        cache_->finish(pages[i], count, nullptr);
      } else {
        try {
          std::vector<uint8_t> bytes(static_cast<size_t>(run_length));
          fetch_checked(run_offset, run_length, bytes.data());
          cache_->finish(pages[i], count, bytes.data());
          report_progress(run_length, 0);
        } catch (const std::exception&) {
          failed = true;
          cache_->finish(pages[i], count, nullptr);
        }
      }
      i = j;
    }
  }

  void report_progress(uint64_t fetched, uint64_t from_cache) {
    std::lock_guard<std::mutex> lock(progress_mutex_);
    fetched_ += fetched;
    from_cache_ += from_cache;
    if (options_.on_progress) options_.on_progress(fetched_, from_cache_, file_.size);
  }

  const std::string url_;
  const HttpSourceOptions options_;
  RangeFetcher fetcher_;
  RemoteFile file_;  // set by the open, fixed afterwards
  std::unique_ptr<RequestPool> pool_;
  std::unique_ptr<PageCache> cache_;
  std::string cache_refusal_;  // why a cache was given but no entry started
  bool opened_from_cache_ = false;

  std::mutex head_mutex_;
  std::vector<uint8_t> head_;  // bytes [0, head_.size()) of the file
  bool header_phase_ = false;

  std::mutex whole_mutex_;
  std::vector<uint8_t> whole_;
  std::atomic<bool> whole_ready_{false};

  std::mutex sequence_mutex_;
  uint64_t last_read_end_ = 0;  // where the previous read ended
  uint64_t readahead_begin_ = 0;  // the last window asked for
  uint64_t readahead_end_ = 0;    // how far readahead has been asked for

  mutable std::mutex progress_mutex_;
  uint64_t fetched_ = 0;
  uint64_t from_cache_ = 0;
};

}  // namespace

std::unique_ptr<HttpSource> open_http_source(const std::string& url,
                                             std::shared_ptr<HttpTransport> transport,
                                             const HttpSourceOptions& options) {
  check_url(url);
  check_options(options);
  if (transport == nullptr) throw Error(ErrorKind::kInvalidArgument, "no HTTP transport");
  return std::make_unique<HttpSourceImpl>(url, std::move(transport), options);
}

std::vector<CachedModel> list_cached_models(CacheStore& store) {
  std::vector<CachedModel> models;
  const std::string suffix = ".index";
  for (const auto& [name, bytes] : store.list()) {
    if (name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::optional<CacheIndex> index = read_cache_index(store, name);
    if (!index || cache_index_name(index->url) != name) continue;
    CachedModel model;
    model.url = index->url;
    model.size = index->file.size;
    model.cached_bytes = index->cached_bytes();
    model.etag = index->file.etag;
    model.last_modified = index->file.last_modified;
    models.push_back(std::move(model));
  }
  std::sort(models.begin(), models.end(),
            [](const CachedModel& a, const CachedModel& b) { return a.url < b.url; });
  return models;
}

void delete_cached_model(CacheStore& store, const std::string& url) {
  store.remove(cache_index_name(url));
  store.remove(cache_pages_name(url));
}

}  // namespace sipllm
