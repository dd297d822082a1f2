// The native HttpTransport: libcurl's easy interface, one transfer per call.
//
// Easy handles are kept between calls (one per concurrent caller at most), so
// connections, TLS sessions and DNS answers are reused the way a browser does.
#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "sipllm/error.h"
#include "sipllm/http_source.h"

namespace sipllm {
namespace {

// Bodies of error statuses are read and dropped, up to this much; past it the
// transfer is cut (the status is all the caller needs).
constexpr uint64_t kMaxErrorBody = 64u << 10;

using Clock = std::chrono::steady_clock;

struct Transfer {
  uint64_t length = 0;
  uint8_t* dst = nullptr;
  HttpRangeResponse response;
  uint64_t received = 0;
  bool stopped_on_purpose = false;
  // The read timeout: when a byte last arrived, and how long silence may last.
  Clock::time_point last_byte;
  Clock::duration read_timeout{};
  bool stalled = false;
};

std::string header_value(const char* data, size_t size, const char* name) {
  const size_t name_length = std::strlen(name);
  if (size <= name_length || data[name_length] != ':') return {};
  for (size_t i = 0; i < name_length; ++i) {
    if (std::tolower(static_cast<unsigned char>(data[i])) != name[i]) return {};
  }
  size_t begin = name_length + 1;
  size_t end = size;
  while (begin < end && (data[begin] == ' ' || data[begin] == '\t')) ++begin;
  while (end > begin && (data[end - 1] == '\r' || data[end - 1] == '\n' || data[end - 1] == ' ')) --end;
  return std::string(data + begin, end - begin);
}

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  t->last_byte = Clock::now();
  if (bytes >= 5 && std::strncmp(data, "HTTP/", 5) == 0) {
    // A new response (after a redirect or a 100 Continue): forget the last one's headers.
    t->response = HttpRangeResponse{};
    const char* space = static_cast<const char*>(std::memchr(data, ' ', bytes));
    if (space != nullptr) t->response.status = std::atoi(space + 1);
    return bytes;
  }
  std::string value;
  if (!(value = header_value(data, bytes, "content-range")).empty()) {
    t->response.content_range = value;
  } else if (!(value = header_value(data, bytes, "etag")).empty()) {
    t->response.etag = value;
  } else if (!(value = header_value(data, bytes, "last-modified")).empty()) {
    t->response.last_modified = value;
  } else if (!(value = header_value(data, bytes, "retry-after")).empty()) {
    t->response.retry_after = value;
  }
  return bytes;
}

// Called by libcurl while a transfer runs (about once a second when nothing
// moves): ends a transfer that has received nothing for the read timeout.
// A slow transfer that keeps receiving is never cut.
int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (Clock::now() - t->last_byte < t->read_timeout) return 0;
  t->stalled = true;
  return 1;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * count;
  t->last_byte = Clock::now();
  const int status = t->response.status;
  if (status == 200 || status == 206) {
    if (t->received < t->length) {
      const auto n = static_cast<size_t>(std::min<uint64_t>(bytes, t->length - t->received));
      std::memcpy(t->dst + t->received, data, n);
    }
    t->received += bytes;
    if (t->received > t->length) {
      // More than was asked: a server that ignored Range. The caller has all
      // it can use; reading a whole model to drop it would be a waste.
      t->stopped_on_purpose = true;
      return 0;
    }
    return bytes;
  }
  t->received += bytes;
  if (t->received > kMaxErrorBody) {
    t->stopped_on_purpose = true;
    return 0;
  }
  return bytes;
}

class CurlTransport final : public HttpTransport {
 public:
  CurlTransport() {
    // libcurl's process-wide setup; thread-safe in the libcurl versions this
    // builds against (7.84 and later), and idempotent.
    const CURLcode code = curl_global_init(CURL_GLOBAL_DEFAULT);
    if (code != CURLE_OK) {
      throw Error(ErrorKind::kNetwork, std::string("libcurl: ") + curl_easy_strerror(code));
    }
  }

  ~CurlTransport() override {
    for (CURL* handle : idle_) curl_easy_cleanup(handle);
    curl_global_cleanup();
  }

  CurlTransport(const CurlTransport&) = delete;
  CurlTransport& operator=(const CurlTransport&) = delete;

  HttpRangeResponse get_range(const std::string& url, uint64_t offset, uint64_t length,
                              uint8_t* dst, double read_timeout_ms) override {
    Transfer t;
    t.length = length;
    t.dst = dst;
    t.read_timeout = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::milli>(read_timeout_ms));
    if (length == 0) {
      t.response.error = "empty range";
      return t.response;
    }
    CURL* handle = take_handle();
    if (handle == nullptr) {
      t.response.error = "libcurl could not create a transfer";
      return t.response;
    }
    const std::string range = std::to_string(offset) + "-" + std::to_string(offset + length - 1);
    char error[CURL_ERROR_SIZE] = "";
    curl_easy_reset(handle);
    curl_easy_setopt(handle, CURLOPT_URL, url.c_str());
    curl_easy_setopt(handle, CURLOPT_RANGE, range.c_str());
    curl_easy_setopt(handle, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(handle, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(handle, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(handle, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(handle, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM: other threads run
    // The read timeout covers connecting too: nothing at all arrives then.
    curl_easy_setopt(handle, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(std::clamp(read_timeout_ms, 1.0, 3.6e6)));
    curl_easy_setopt(handle, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(handle, CURLOPT_XFERINFODATA, &t);
    curl_easy_setopt(handle, CURLOPT_USERAGENT, "sipllm");
    curl_easy_setopt(handle, CURLOPT_ERRORBUFFER, error);
    curl_easy_setopt(handle, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(handle, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(handle, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(handle, CURLOPT_WRITEDATA, &t);

    t.last_byte = Clock::now();
    const CURLcode code = curl_easy_perform(handle);
    long status = 0;
    curl_easy_getinfo(handle, CURLINFO_RESPONSE_CODE, &status);
    curl_off_t declared = -1;
    curl_easy_getinfo(handle, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &declared);
    give_back(handle);

    t.response.status = static_cast<int>(status);
    t.response.body_bytes = t.received;
    if (t.stopped_on_purpose) {
      if (declared > 0 && static_cast<uint64_t>(declared) > t.received) {
        t.response.body_bytes = static_cast<uint64_t>(declared);
      }
    } else if (code != CURLE_OK) {
      t.response.error = error[0] != '\0' ? std::string(error) : curl_easy_strerror(code);
      if (t.stalled && code == CURLE_ABORTED_BY_CALLBACK) {
        t.response.failure = HttpFailure::kStalled;
      } else if (code == CURLE_TOO_MANY_REDIRECTS) {
        t.response.failure = HttpFailure::kTooManyRedirects;
      }
    }
    return t.response;
  }

 private:
  CURL* take_handle() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!idle_.empty()) {
        CURL* handle = idle_.back();
        idle_.pop_back();
        return handle;
      }
    }
    return curl_easy_init();
  }

  void give_back(CURL* handle) {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back(handle);
  }

  std::mutex mutex_;
  std::vector<CURL*> idle_;
};

}  // namespace

std::shared_ptr<HttpTransport> make_curl_transport() { return std::make_shared<CurlTransport>(); }

}  // namespace sipllm
