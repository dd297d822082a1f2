// The HTTP range responses: what a server or a CDN answers is input from the
// network, checked by parse_content_range and check_range_response before a
// byte is used. The first byte picks the part (mod 3):
//   0: parse_content_range on the rest as a header value. What it accepts
//      must be a range it can state again ("bytes S-E/T") and read back the
//      same.
//   1: check_range_response on a response, a request and a known file all
//      taken from the input. An accepted response must be the asked bytes.
//   2: an HttpSource over a transport that answers, request after request,
//      what the input scripts (status, Content-Range, validators, body
//      length; the body's bytes are the file's bytes at the offset its
//      Content-Range names), then reads of the file. Every read must give the
//      file's bytes at the offset asked, or an Error.
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "io/http/range_response.h"
#include "sipllm/http_source.h"

using namespace sipllm;

namespace {

// ---- 0: Content-Range ---------------------------------------------------------

void content_range(const std::string& text) {
  uint64_t start = 0, end = 0, total = 0;
  if (!parse_content_range(text, &start, &end, &total)) return;
  SIPLLM_FUZZ_CHECK(start <= end, "Content-Range '" + text + "' accepted with its end before its start");
  SIPLLM_FUZZ_CHECK(total == 0 || end < total, "Content-Range '" + text + "' accepted past its total");
  const std::string again = "bytes " + std::to_string(start) + "-" + std::to_string(end) + "/" +
                            (total == 0 ? std::string("*") : std::to_string(total));
  uint64_t start2 = 0, end2 = 0, total2 = 0;
  SIPLLM_FUZZ_CHECK(parse_content_range(again, &start2, &end2, &total2) && start2 == start && end2 == end &&
                        total2 == total,
                    "Content-Range '" + text + "' does not read back as '" + again + "'");
}

// ---- 1: one response ------------------------------------------------------------

uint64_t read_size(fuzz::Reader& in) {
  // Small values most of the time (they meet each other), any value sometimes.
  const uint8_t kind = in.u8();
  if (kind < 200) return in.u16();
  if (kind < 250) return in.u32();
  return in.u64();
}

int read_status(fuzz::Reader& in) {
  static const int kStatuses[] = {206, 206, 206, 200, 0, 416, 404, 500, 503, 302, 204, 416, 206, 200};
  const uint8_t pick = in.u8();
  if (pick < 2 * std::size(kStatuses)) return kStatuses[pick % std::size(kStatuses)];
  return static_cast<int>(in.u16()) - 100;
}

// A Content-Range: the right one for the request, one off by a little, or
// text from the input.
std::string read_content_range(fuzz::Reader& in, uint64_t offset, uint64_t length, uint64_t size) {
  const uint8_t kind = in.u8();
  const uint64_t last = length == 0 ? offset : std::min(offset + length, size == 0 ? offset + length : size) - 1;
  switch (kind % 6) {
    case 0:
    case 1:
      return "bytes " + std::to_string(offset) + "-" + std::to_string(last) + "/" + std::to_string(size);
    case 2:
      return "bytes " + std::to_string(offset + in.u8() % 3) + "-" + std::to_string(last + in.u8() % 3 - 1) + "/" +
             std::to_string(size + in.u8() % 3 - 1);
    case 3:
      return "bytes " + std::to_string(offset) + "-" + std::to_string(last) + "/*";
    case 4:
      return "";
    default:
      return in.text(64);
  }
}

void one_response(fuzz::Reader& in) {
  const uint64_t offset = read_size(in);
  const uint64_t length = read_size(in);
  RemoteFile known;
  known.size = read_size(in);
  known.etag = in.text(16);
  known.last_modified = in.text(32);
  HttpRangeResponse response;
  response.status = read_status(in);
  response.error = in.flag() ? in.text(32) : "";
  response.content_range = read_content_range(in, offset, length, known.size == 0 ? read_size(in) : known.size);
  response.etag = in.flag() ? known.etag : in.text(16);
  response.last_modified = in.flag() ? known.last_modified : in.text(32);
  response.body_bytes = in.flag() ? length : read_size(in);

  const RangeCheck check = check_range_response(response, offset, length, known);
  describe_range("http://fuzz.invalid/model.gguf", offset, length);
  if (check.verdict != RangeVerdict::kOk) {
    SIPLLM_FUZZ_CHECK(!check.problem.empty(), "a refused response without a reason");
    return;
  }
  SIPLLM_FUZZ_CHECK(check.problem.empty(), "an accepted response with a problem: " + check.problem);
  SIPLLM_FUZZ_CHECK(check.body_length <= length, "accepted more body than was asked for");
  SIPLLM_FUZZ_CHECK(known.size == 0 || check.seen.size == known.size, "accepted a file of another size");
  if (response.status == 206) {
    uint64_t start = 0, end = 0, total = 0;
    SIPLLM_FUZZ_CHECK(parse_content_range(response.content_range, &start, &end, &total),
                      "accepted an unreadable Content-Range");
    SIPLLM_FUZZ_CHECK(start == offset && end - start + 1 == check.body_length &&
                          check.body_length == std::min(offset + length, check.seen.size) - offset,
                      "accepted Content-Range '" + response.content_range + "' for another range than asked");
  } else {
    SIPLLM_FUZZ_CHECK(response.status == 200 && offset == 0, "accepted HTTP " + std::to_string(response.status) +
                                                                 " for a range that does not start the file");
  }
}

// ---- 2: a source over a scripted server ------------------------------------------

// Answers each request as the input scripts; once the script is over, as a
// server of a file of `size` bytes. A body's bytes are the file's at the
// offset its Content-Range states (at 0 for a 200), as a server that
// answered another range than asked would send them.
class ScriptedTransport final : public HttpTransport {
 public:
  ScriptedTransport(std::string script, uint64_t size) : script_(std::move(script)), size_(size) {}

  HttpRangeResponse get_range(const std::string&, uint64_t offset, uint64_t length, uint8_t* dst, double /*read_timeout_ms*/) override {
    std::lock_guard<std::mutex> lock(mutex_);
    fuzz::Reader in(reinterpret_cast<const uint8_t*>(script_.data()) + used_, script_.size() - used_);
    if (in.empty()) return fuzz::PatternTransport(size_, "\"v1\"", "").get_range("", offset, length, dst, 0);
    HttpRangeResponse response;
    response.status = read_status(in);
    response.error = in.u8() < 16 ? "connection reset" : "";
    response.content_range = read_content_range(in, offset, length, size_);
    response.etag = in.u8() < 240 ? "\"v1\"" : "\"v2\"";
    // Body lengths stay near the file's size (at most 4 MiB): loading a
    // whole file into memory is what allow_whole_file asks for, and the file
    // is at most 3 MiB.
    // A 200's body is the whole file, a 206's the asked bytes that exist.
    const uint64_t natural = response.status == 200 ? size_ : offset < size_ ? std::min(length, size_ - offset) : 0;
    response.body_bytes = in.u8() < 128 ? natural : std::min<uint64_t>(in.u32() % (size_ * 2 + 1), 4u << 20);
    used_ = script_.size() - in.remaining();
    uint64_t start = 0, end = 0, total = 0;
    uint64_t at = offset;
    if (response.status == 200) {
      at = 0;
    } else if (parse_content_range(response.content_range, &start, &end, &total)) {
      at = start;
    }
    const uint64_t copied = std::min(response.body_bytes, length);
    if (at <= UINT64_MAX - copied) fuzz::fill_pattern(at, dst, static_cast<size_t>(copied));
    return response;
  }

 private:
  std::mutex mutex_;
  std::string script_;
  size_t used_ = 0;
  uint64_t size_;
};

void scripted_source(fuzz::Reader& in) {
  const uint8_t flags = in.u8();
  // Up to 3 MiB: past the 1 MiB the open asks for, so that the header grows
  // and the cache fills, yet every byte of it is cheap to serve.
  const uint64_t size = 1 + in.u32() % (3u << 20);
  HttpSourceOptions options;
  options.max_retries = flags & 3;
  options.backoff_ms = 0;
  options.allow_whole_file = (flags & 4) != 0;
  // The file is at most 3 MiB; a server may state any size, which the
  // budget refuses rather than allocating it.
  options.whole_file_budget = 4u << 20;
  options.parallel_requests = (flags & 8) != 0 ? 2 : 1;
  options.page_bytes = 4096;
  std::shared_ptr<fuzz::MemoryStore> store;
  if ((flags & 16) != 0) {
    store = std::make_shared<fuzz::MemoryStore>();
    options.cache = store;
  }
  std::vector<fuzz::ReadRequest> reads;
  const int n_reads = 1 + in.u8() % 4;
  for (int i = 0; i < n_reads; ++i) reads.push_back({in.u32(), in.u32() % (256u << 10)});
  auto transport = std::make_shared<ScriptedTransport>(in.rest(), size);

  fuzz::accepts([&] {
    std::unique_ptr<HttpSource> source = open_http_source("http://fuzz.invalid/model.gguf", transport, options);
    fuzz::check_reads(*source, reads);
    source->stats();
  });
  if (store != nullptr) list_cached_models(*store);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Reader in(data, size);
  switch (in.u8() % 3) {
    case 0:
      content_range(in.rest());
      break;
    case 1:
      one_response(in);
      break;
    default:
      scripted_source(in);
      break;
  }
  return 0;
}
