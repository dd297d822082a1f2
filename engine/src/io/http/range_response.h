// Checking one range response against what was asked and what is known about
// the file. The rules are HTTP's (RFC 9110, sections 14 and 15.3.7): a 206
// whose Content-Range names exactly the asked bytes and the file's total, and
// a body of that length. Everything else is classified so that the caller
// knows whether to retry, to give up, or to fall back to the whole file.
#pragma once

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
  kRetry,         // transient: network error, short body, 5xx
  kFail,          // permanent: 4xx, a malformed or mismatching Content-Range
  kChanged,       // the file is another version than the one known
  kRangeIgnored,  // 200 with the whole file: the server ignored Range
};

struct RangeCheck {
  RangeVerdict verdict = RangeVerdict::kFail;
  std::string problem;   // what was wrong, for the error message ("" when ok)
  RemoteFile seen;       // size, ETag and Last-Modified this response stated
  uint64_t body_length = 0;  // bytes of the body that belong to the asked range
};

// "bytes START-END/TOTAL" (TOTAL may be "*": *total is then 0). False when
// the text is not of that form or END < START.
bool parse_content_range(const std::string& text, uint64_t* start, uint64_t* end, uint64_t* total);

// Classifies `response` to a request for [offset, offset + length) of a file
// described by `known`. When known.size is 0 (the first request), a range
// reaching past the end is fine: the body then holds the file's tail.
RangeCheck check_range_response(const HttpRangeResponse& response, uint64_t offset,
                                uint64_t length, const RemoteFile& known);

// "URL bytes FIRST-LAST" (inclusive, as in a Range header): how every error names a request.
std::string describe_range(const std::string& url, uint64_t offset, uint64_t length);

}  // namespace sipllm
