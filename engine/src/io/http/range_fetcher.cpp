#include "io/http/range_fetcher.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace sipllm {

namespace {
constexpr double kMaxBackoffMs = 30'000;
}  // namespace

RangeFetcher::RangeFetcher(std::string url, std::shared_ptr<HttpTransport> transport,
                           int max_retries, double backoff_ms)
    : url_(std::move(url)),
      transport_(std::move(transport)),
      max_retries_(max_retries),
      backoff_ms_(backoff_ms) {}

RangeCheck RangeFetcher::fetch(uint64_t offset, uint64_t length, uint8_t* dst,
                               const RemoteFile& known) {
  const std::string where = describe_range(url_, offset, length);
  double delay_ms = backoff_ms_;
  for (int attempt = 0;; ++attempt) {
    ++requests_;
    const HttpRangeResponse response = transport_->get_range(url_, offset, length, dst);
    RangeCheck check = check_range_response(response, offset, length, known);
    switch (check.verdict) {
      case RangeVerdict::kOk:
        return check;
      case RangeVerdict::kRetry:
        break;
      case RangeVerdict::kFail:
        throw RangeError(check.verdict, check.seen, where + ": " + check.problem);
      case RangeVerdict::kChanged:
        throw RangeError(check.verdict, check.seen,
                         where + ": the file changed on the server: " + check.problem);
      case RangeVerdict::kRangeIgnored:
        throw RangeError(check.verdict, check.seen,
                         where + ": " + check.problem +
                             "; streaming needs HTTP 206 answers (allow_whole_file would load "
                             "the whole file into memory instead)");
    }
    if (attempt >= max_retries_) {
      throw RangeError(RangeVerdict::kRetry, check.seen,
                       where + ": " + check.problem + " (gave up after " +
                           std::to_string(attempt + 1) + (attempt == 0 ? " attempt)" : " attempts)"));
    }
    ++retries_;
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_ms));
    delay_ms = std::min(delay_ms * 2, kMaxBackoffMs);
  }
}

}  // namespace sipllm
