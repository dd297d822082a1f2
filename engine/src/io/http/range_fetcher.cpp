#include "io/http/range_fetcher.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace sipllm {

namespace {
constexpr double kMaxBackoffMs = 30'000;

std::string attempts(int attempt) {
  return std::to_string(attempt + 1) + (attempt == 0 ? " attempt" : " attempts");
}
}  // namespace

RangeFetcher::RangeFetcher(std::string url, std::shared_ptr<HttpTransport> transport,
                           const RetryPolicy& policy)
    : url_(std::move(url)), transport_(std::move(transport)), policy_(policy) {}

RangeCheck RangeFetcher::fetch(uint64_t offset, uint64_t length, uint8_t* dst,
                               const RemoteFile& known) {
  const std::string where = describe_range(url_, offset, length);
  double delay_ms = policy_.backoff_ms;
  for (int attempt = 0;; ++attempt) {
    ++requests_;
    const HttpRangeResponse response =
        transport_->get_range(url_, offset, length, dst, policy_.read_timeout_ms);
    RangeCheck check = check_range_response(response, offset, length, known, policy_.read_timeout_ms);
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
    if (attempt >= policy_.max_retries) {
      throw RangeError(RangeVerdict::kRetry, check.seen,
                       where + ": " + check.problem + " (gave up after " + attempts(attempt) + ")");
    }
    double wait_ms = delay_ms;
    if (check.retry_after_ms >= 0) {
      // The server said when to come back. Waiting longer than the cap would
      // look like a hang to whoever waits for the model: say so instead.
      if (check.retry_after_ms > policy_.max_retry_after_ms) {
        throw RangeError(RangeVerdict::kRetry, check.seen,
                         where + ": " + check.problem + ": the server asks to wait " +
                             describe_ms(check.retry_after_ms) + ", longer than the " +
                             describe_ms(policy_.max_retry_after_ms) + " allowed (max_retry_after_ms; " +
                             attempts(attempt) + ")");
      }
      wait_ms = check.retry_after_ms;
    }
    ++retries_;
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(wait_ms));
    delay_ms = std::min(delay_ms * 2, kMaxBackoffMs);
  }
}

}  // namespace sipllm
