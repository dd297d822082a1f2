#include "sipllm/weight_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "sipllm/error.h"

#if !defined(__EMSCRIPTEN__)
#include <sys/mman.h>
#endif

namespace sipllm {
namespace {

[[noreturn]] void throw_out_of_range(const WeightSource& source, uint64_t offset,
                                     size_t length) {
  throw Error(ErrorKind::kIo, source.describe() + ": read of " + std::to_string(length) +
                                  " bytes at offset " + std::to_string(offset) +
                                  " runs past the end of the file (" +
                                  std::to_string(source.size()) + " bytes)");
}

bool in_bounds(uint64_t size, uint64_t offset, size_t length) {
  return offset <= size && length <= size - offset;
}

// Owns a file descriptor; closes it on every path out.
class FileDescriptor {
 public:
  explicit FileDescriptor(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY)) {
    if (fd_ < 0) {
      throw Error(ErrorKind::kIo, path + ": cannot open: " + std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      throw Error(ErrorKind::kIo, path + ": not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~FileDescriptor() { ::close(fd_); }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;

  int get() const { return fd_; }
  uint64_t size() const { return size_; }

 private:
  int fd_;
  uint64_t size_ = 0;
};

class FileSource final : public WeightSource {
 public:
  explicit FileSource(const std::string& path) : path_(path), fd_(path) {}

  uint64_t size() const override { return fd_.size(); }
  std::string describe() const override { return path_; }

  void read(uint64_t offset, void* dst, size_t length) override {
    if (!in_bounds(size(), offset, length)) throw_out_of_range(*this, offset, length);
    auto* out = static_cast<uint8_t*>(dst);
    size_t done = 0;
    while (done < length) {
      ssize_t n = ::pread(fd_.get(), out + done, length - done,
                          static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        throw Error(ErrorKind::kIo, path_ + ": read failed at offset " +
                                        std::to_string(offset + done) + ": " +
                                        (n == 0 ? "unexpected end of file" : std::strerror(errno)));
      }
      done += static_cast<size_t>(n);
    }
  }

 private:
  std::string path_;
  FileDescriptor fd_;
};

#if !defined(__EMSCRIPTEN__)
class MmapSource final : public WeightSource {
 public:
  explicit MmapSource(const std::string& path) : path_(path) {
    FileDescriptor fd(path);
    size_ = fd.size();
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd.get(), 0);
      if (p == MAP_FAILED) {
        throw Error(ErrorKind::kIo, path + ": mmap failed: " + std::strerror(errno));
      }
      base_ = static_cast<const uint8_t*>(p);
    }
  }
  ~MmapSource() override {
    if (base_ != nullptr) ::munmap(const_cast<uint8_t*>(base_), size_);
  }
  MmapSource(const MmapSource&) = delete;
  MmapSource& operator=(const MmapSource&) = delete;

  uint64_t size() const override { return size_; }
  std::string describe() const override { return path_; }

  void read(uint64_t offset, void* dst, size_t length) override {
    if (!in_bounds(size_, offset, length)) throw_out_of_range(*this, offset, length);
    if (length > 0) std::memcpy(dst, base_ + offset, length);
  }

 private:
  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
};
#endif

class MemorySource final : public WeightSource {
 public:
  MemorySource(std::vector<uint8_t> bytes, std::string name)
      : bytes_(std::move(bytes)), name_(std::move(name)) {}

  uint64_t size() const override { return bytes_.size(); }
  std::string describe() const override { return name_; }

  void read(uint64_t offset, void* dst, size_t length) override {
    if (!in_bounds(size(), offset, length)) throw_out_of_range(*this, offset, length);
    if (length > 0) std::memcpy(dst, bytes_.data() + offset, length);
  }

 private:
  std::vector<uint8_t> bytes_;
  std::string name_;
};

class ThrottledSource final : public WeightSource {
 public:
  ThrottledSource(std::unique_ptr<WeightSource> inner, const ThrottleOptions& options)
      : inner_(std::move(inner)), options_(options), rng_(options.seed) {}

  uint64_t size() const override { return inner_->size(); }
  std::string describe() const override { return inner_->describe(); }

  void read(uint64_t offset, void* dst, size_t length) override {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    const auto latency = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::milli>(options_.latency_ms * jitter_factor()));
    Clock::time_point done = start + latency;
    if (options_.bandwidth_mb_per_s > 0) {
      // The bytes go out after the latency, once the link has sent what
      // earlier reads reserved.
      const auto transfer = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(static_cast<double>(length) / (options_.bandwidth_mb_per_s * 1e6)));
      std::lock_guard<std::mutex> lock(mutex_);
      done = std::max(done, link_free_) + transfer;
      link_free_ = done;
    }
    inner_->read(offset, dst, length);
    std::this_thread::sleep_until(done);
  }

  // It stands for a network or slow storage: reads that wait gain from company.
  int parallel_reads() const override { return 2; }

 private:
  double jitter_factor() {
    if (options_.jitter <= 0) return 1.0;
    std::lock_guard<std::mutex> lock(mutex_);
    std::uniform_real_distribution<double> dist(1.0 - options_.jitter, 1.0 + options_.jitter);
    return dist(rng_);
  }

  std::unique_ptr<WeightSource> inner_;
  ThrottleOptions options_;
  std::mutex mutex_;  // guards rng_ and link_free_
  std::mt19937_64 rng_;
  std::chrono::steady_clock::time_point link_free_{};
};

}  // namespace

std::unique_ptr<WeightSource> open_file_source(const std::string& path) {
  return std::make_unique<FileSource>(path);
}

std::unique_ptr<WeightSource> open_mmap_source(const std::string& path) {
#if defined(__EMSCRIPTEN__)
  return open_file_source(path);
#else
  return std::make_unique<MmapSource>(path);
#endif
}

std::unique_ptr<WeightSource> make_memory_source(std::vector<uint8_t> bytes, std::string name) {
  return std::make_unique<MemorySource>(std::move(bytes), std::move(name));
}

std::unique_ptr<WeightSource> make_throttled_source(std::unique_ptr<WeightSource> inner,
                                                    const ThrottleOptions& options) {
  return std::make_unique<ThrottledSource>(std::move(inner), options);
}

}  // namespace sipllm
