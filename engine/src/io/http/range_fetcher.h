// One validated range request, retried with exponential backoff: the only
// place the HTTP source talks to its transport.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "io/http/range_response.h"
#include "sipllm/error.h"
#include "sipllm/http_source.h"

namespace sipllm {

// A request that failed for good. It is an Error(kNetwork) whose message names
// the URL, the byte range and what was wrong; `verdict` lets the source react
// to a server that ignored Range or a file that changed.
class RangeError : public Error {
 public:
  RangeError(RangeVerdict verdict, const RemoteFile& seen, const std::string& message)
      : Error(ErrorKind::kNetwork, message), verdict_(verdict), seen_(seen) {}
  RangeVerdict verdict() const { return verdict_; }
  const RemoteFile& seen() const { return seen_; }

 private:
  RangeVerdict verdict_;
  RemoteFile seen_;
};

// How the fetcher retries and how long it lets a transfer stall.
struct RetryPolicy {
  int max_retries = 4;
  double backoff_ms = 100;
  double max_retry_after_ms = 30'000;
  double read_timeout_ms = 30'000;
};

class RangeFetcher {
 public:
  RangeFetcher(std::string url, std::shared_ptr<HttpTransport> transport, const RetryPolicy& policy);

  // Fetches [offset, offset + length) into dst, checked against `known`
  // (see check_range_response). Network errors, stalls, short bodies, 5xx
  // and 429 are retried up to max_retries times, waiting what a Retry-After
  // asks for (failing at once when that is over max_retry_after_ms), else
  // backoff_ms, then twice as long, and so on. Returns the accepted
  // response's check; throws RangeError. `dst` may hold bytes of a rejected
  // response afterwards: only a return makes it valid.
  RangeCheck fetch(uint64_t offset, uint64_t length, uint8_t* dst, const RemoteFile& known);

  const std::string& url() const { return url_; }
  uint64_t requests() const { return requests_; }
  uint64_t retries() const { return retries_; }

 private:
  const std::string url_;
  const std::shared_ptr<HttpTransport> transport_;
  const RetryPolicy policy_;
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> retries_{0};
};

}  // namespace sipllm
