// Checking one range response against what was asked and what is known about
// the file. The rules are HTTP's (RFC 9110, sections 14 and 15.3.7): a 206
// whose Content-Range names exactly the asked bytes and the file's total, and
// a body of that length. Everything else is classified so that the caller
// knows whether to retry, to give up, or to fall back to the whole file.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "sipllm/http_source.h"

namespace sipllm {

// What identifies one version of the file on the server. A field that is
// unknown (size 0, validator "") is learned from the first response.
struct RemoteFile {
  uint64_t size = 0;
  std::string etag;
  std::string last_modified;
};

enum class RangeVerdict {
  kOk,            // the body holds the asked bytes (or all of a shorter file)
  kRetry,         // transient: network error, stall, short body, 5xx, 429
  kFail,          // permanent: other 4xx, a redirect loop, an aborted request, a malformed or
                  // mismatching Content-Range
  kChanged,       // the file is another version than the one known
  kRangeIgnored,  // 200 with the whole file: the server ignored Range
};

struct RangeCheck {
  RangeVerdict verdict = RangeVerdict::kFail;
  std::string problem;   // what was wrong, for the error message ("" when ok)
  RemoteFile seen;       // size, ETag and Last-Modified this response stated
  uint64_t body_length = 0;  // bytes of the body that belong to the asked range
  // For kRetry: how long the server asked to wait (Retry-After of a 429 or
  // 503), in ms; -1 when it did not say.
  double retry_after_ms = -1;
};

// "bytes START-END/TOTAL" (TOTAL may be "*": *total is then 0). False when
// the text is not of that form or END < START.
bool parse_content_range(const std::string& text, uint64_t* start, uint64_t* end, uint64_t* total);

// Classifies `response` to a request for [offset, offset + length) of a file
// described by `known`. When known.size is 0 (the first request), a range
// reaching past the end is fine: the body then holds the file's tail.
// `read_timeout_ms` is the transport's, for the message about a stall.
RangeCheck check_range_response(const HttpRangeResponse& response, uint64_t offset,
                                uint64_t length, const RemoteFile& known,
                                double read_timeout_ms = 0);

// A Retry-After value (RFC 9110, 10.2.3: delay-seconds, or an IMF-fixdate
// such as "Sun, 06 Nov 1994 08:49:37 GMT") as a wait in ms from `now`
// (0 for a date in the past); -1 when it is neither.
double parse_retry_after(const std::string& value, std::chrono::system_clock::time_point now);

// "2 s", "1.5 s", "250 ms": a duration as error messages state it.
std::string describe_ms(double ms);

// "URL bytes FIRST-LAST" (inclusive, as in a Range header): how every error names a request.
std::string describe_range(const std::string& url, uint64_t offset, uint64_t length);

}  // namespace sipllm
