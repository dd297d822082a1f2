#include "io/http/range_response.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

namespace sipllm {
namespace {

// Parses the decimal digits at text[*pos...]; false when there are none or they overflow.
bool parse_decimal(const std::string& text, size_t* pos, uint64_t* value) {
  const size_t begin = *pos;
  uint64_t v = 0;
  while (*pos < text.size() && std::isdigit(static_cast<unsigned char>(text[*pos]))) {
    const auto digit = static_cast<uint64_t>(text[*pos] - '0');
    if (v > (std::numeric_limits<uint64_t>::max() - digit) / 10) return false;
    v = v * 10 + digit;
    ++*pos;
  }
  *value = v;
  return *pos > begin;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// A validator that both sides state and that differs: the file changed. An
// ETag on both sides decides alone (CDN edges may disagree on Last-Modified
// for the same content); Last-Modified is compared only without one.
std::string validator_change(const RemoteFile& known, const RemoteFile& seen) {
  if (!known.etag.empty() && !seen.etag.empty()) {
    return known.etag == seen.etag ? "" : "ETag was " + known.etag + ", now " + seen.etag;
  }
  if (!known.last_modified.empty() && !seen.last_modified.empty() &&
      known.last_modified != seen.last_modified) {
    return "Last-Modified was " + quoted(known.last_modified) + ", now " + quoted(seen.last_modified);
  }
  return "";
}

RangeCheck verdict(RangeVerdict v, std::string problem, const RemoteFile& seen) {
  RangeCheck check;
  check.verdict = v;
  check.problem = std::move(problem);
  check.seen = seen;
  return check;
}

// Days from 1970-01-01 to the given civil date (proleptic Gregorian).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

// "Sun, 06 Nov 1994 08:49:37 GMT" as seconds since the epoch; false when it is not one.
bool parse_imf_fixdate(const std::string& text, int64_t* seconds) {
  static const char* const kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  char weekday[4] = "", month[4] = "", zone[4] = "";
  int day = 0, year = 0, hour = 0, minute = 0, second = 0, used = 0;
  if (std::sscanf(text.c_str(), "%3[A-Za-z], %2d %3s %4d %2d:%2d:%2d %3s%n", weekday, &day, month, &year, &hour,
                  &minute, &second, zone, &used) != 8 ||
      static_cast<size_t>(used) != text.size() || std::strcmp(zone, "GMT") != 0 || day < 1 || day > 31 ||
      hour > 23 || minute > 59 || second > 60) {
    return false;
  }
  unsigned m = 0;
  while (m < 12 && std::strcmp(month, kMonths[m]) != 0) ++m;
  if (m == 12) return false;
  *seconds = days_from_civil(year, m + 1, static_cast<unsigned>(day)) * 86400 + hour * 3600 + minute * 60 + second;
  return true;
}

}  // namespace

std::string describe_ms(double ms) {
  char text[32];
  if (ms >= 1000) {
    const double s = ms / 1000;
    if (s == std::floor(s)) {
      std::snprintf(text, sizeof text, "%.0f s", s);
    } else {
      std::snprintf(text, sizeof text, "%.3g s", s);
    }
  } else {
    std::snprintf(text, sizeof text, "%.0f ms", ms);
  }
  return text;
}

double parse_retry_after(const std::string& value, std::chrono::system_clock::time_point now) {
  size_t begin = 0, end = value.size();
  while (begin < end && value[begin] == ' ') ++begin;
  while (end > begin && value[end - 1] == ' ') --end;
  const std::string text = value.substr(begin, end - begin);
  if (text.empty()) return -1;
  if (std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    // Huge values are kept huge (they only ever exceed the cap), not wrapped.
    return text.size() > 12 ? 1e15 : std::stod(text) * 1000;
  }
  int64_t at = 0;
  if (!parse_imf_fixdate(text, &at)) return -1;
  const double now_ms = std::chrono::duration<double, std::milli>(now.time_since_epoch()).count();
  return std::max(0.0, static_cast<double>(at) * 1000 - now_ms);
}

bool parse_content_range(const std::string& text, uint64_t* start, uint64_t* end, uint64_t* total) {
  size_t pos = 0;
  while (pos < text.size() && text[pos] == ' ') ++pos;
  const std::string unit = "bytes ";
  if (text.compare(pos, unit.size(), unit) != 0) return false;
  pos += unit.size();
  while (pos < text.size() && text[pos] == ' ') ++pos;
  if (!parse_decimal(text, &pos, start)) return false;
  if (pos >= text.size() || text[pos++] != '-') return false;
  if (!parse_decimal(text, &pos, end) || *end < *start) return false;
  if (pos >= text.size() || text[pos++] != '/') return false;
  if (pos < text.size() && text[pos] == '*') {
    *total = 0;
    ++pos;
  } else if (!parse_decimal(text, &pos, total) || *end >= *total) {
    return false;
  }
  while (pos < text.size() && text[pos] == ' ') ++pos;
  return pos == text.size();
}

std::string describe_range(const std::string& url, uint64_t offset, uint64_t length) {
  const uint64_t last = length == 0 ? offset : offset + length - 1;
  return url + " bytes " + std::to_string(offset) + "-" + std::to_string(last);
}

RangeCheck check_range_response(const HttpRangeResponse& response, uint64_t offset,
                                uint64_t length, const RemoteFile& known, double read_timeout_ms) {
  RemoteFile seen;
  seen.etag = response.etag;
  seen.last_modified = response.last_modified;
  const std::string status = "HTTP " + std::to_string(response.status);

  if (response.failure == HttpFailure::kAborted) {
    return verdict(RangeVerdict::kFail, "the request was abandoned: the model is being closed", seen);
  }
  if (response.failure == HttpFailure::kTooManyRedirects) {
    // Following a loop again only loops again.
    return verdict(RangeVerdict::kFail,
                   "too many redirects (a redirect loop?)" +
                       (response.error.empty() ? std::string() : ": " + response.error),
                   seen);
  }
  if (!response.error.empty() || response.status == 0 || response.failure == HttpFailure::kStalled) {
    std::string problem = response.error.empty() ? "no response" : response.error;
    if (response.failure == HttpFailure::kStalled) {
      problem = "no bytes for " + describe_ms(read_timeout_ms) + " (read timeout)";
    }
    if (response.status != 0) {
      problem += " (after " + status + ", " + std::to_string(response.body_bytes) + " of " +
                 std::to_string(length) + " bytes received)";
    }
    return verdict(RangeVerdict::kRetry, problem, seen);
  }
  if (response.status >= 500 || response.status == 429 || response.status == 408) {
    // Overloaded or briefly unavailable: worth asking again, when it says.
    RangeCheck check = verdict(RangeVerdict::kRetry, status, seen);
    if (!response.retry_after.empty() && (response.status == 429 || response.status == 503)) {
      check.retry_after_ms = parse_retry_after(response.retry_after, std::chrono::system_clock::now());
      if (check.retry_after_ms >= 0) check.problem += " (Retry-After: " + response.retry_after + ")";
    }
    return check;
  }
  if (response.status == 416) {
    return verdict(RangeVerdict::kFail,
                   status + " (range not satisfiable: Content-Range " +
                       quoted(response.content_range) + ")",
                   seen);
  }
  if (response.status >= 400) return verdict(RangeVerdict::kFail, status, seen);

  if (response.status == 200) {
    // The whole file. Fine only when that is what was asked: a read of the
    // whole file, or a first request larger than the file.
    seen.size = response.body_bytes;
    const bool whole_asked = offset == 0 && response.body_bytes <= length &&
                             (known.size == 0 || known.size == response.body_bytes);
    if (!whole_asked) {
      return verdict(RangeVerdict::kRangeIgnored,
                     "the server ignored the Range header and answered HTTP 200 with the whole "
                     "file (" + std::to_string(response.body_bytes) + " bytes)",
                     seen);
    }
    const std::string change = validator_change(known, seen);
    if (!change.empty()) return verdict(RangeVerdict::kChanged, change, seen);
    RangeCheck ok = verdict(RangeVerdict::kOk, "", seen);
    ok.body_length = response.body_bytes;
    return ok;
  }
  if (response.status != 206) {
    return verdict(RangeVerdict::kFail, "unexpected " + status, seen);
  }

  uint64_t start = 0, end = 0, total = 0;
  if (response.content_range.empty()) {
    return verdict(RangeVerdict::kFail,
                   "HTTP 206 without a readable Content-Range header (a cross-origin server must "
                   "list it in Access-Control-Expose-Headers)",
                   seen);
  }
  if (!parse_content_range(response.content_range, &start, &end, &total)) {
    return verdict(RangeVerdict::kFail,
                   "malformed Content-Range " + quoted(response.content_range), seen);
  }
  if (total == 0 && known.size == 0) {
    return verdict(RangeVerdict::kFail,
                   "Content-Range " + quoted(response.content_range) +
                       " does not state the file's size",
                   seen);
  }
  seen.size = total == 0 ? known.size : total;
  if (known.size != 0 && seen.size != known.size) {
    return verdict(RangeVerdict::kChanged,
                   "size was " + std::to_string(known.size) + " bytes, now " +
                       std::to_string(seen.size) + " (Content-Range " +
                       quoted(response.content_range) + ")",
                   seen);
  }
  const std::string change = validator_change(known, seen);
  if (!change.empty()) return verdict(RangeVerdict::kChanged, change, seen);

  if (offset >= seen.size) {
    return verdict(RangeVerdict::kFail, "the file has only " + std::to_string(seen.size) + " bytes",
                   seen);
  }
  const uint64_t expected_end = std::min(offset + length, seen.size) - 1;
  if (start != offset || end != expected_end) {
    return verdict(RangeVerdict::kFail,
                   "Content-Range " + quoted(response.content_range) + " does not match the bytes " +
                       std::to_string(offset) + "-" + std::to_string(expected_end) + " asked for",
                   seen);
  }
  const uint64_t expected_body = end - start + 1;
  if (response.body_bytes < expected_body) {
    return verdict(RangeVerdict::kRetry,
                   "the body ended after " + std::to_string(response.body_bytes) + " of " +
                       std::to_string(expected_body) + " bytes",
                   seen);
  }
  if (response.body_bytes > expected_body) {
    return verdict(RangeVerdict::kFail,
                   "the body has " + std::to_string(response.body_bytes) +
                       " bytes, more than the " + std::to_string(expected_body) +
                       " its Content-Range announces",
                   seen);
  }
  RangeCheck ok = verdict(RangeVerdict::kOk, "", seen);
  ok.body_length = expected_body;
  return ok;
}

}  // namespace sipllm
