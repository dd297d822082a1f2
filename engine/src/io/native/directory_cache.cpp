// The native CacheStore: one file per name in a directory, written in place
// with pwrite so that a model's pages land at their own offsets.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "sipllm/error.h"
#include "sipllm/http_source.h"

namespace sipllm {
namespace {

std::string errno_text() { return std::strerror(errno); }

void make_directories(const std::string& path) {
  for (size_t slash = path.find('/', 1);; slash = path.find('/', slash + 1)) {
    const std::string prefix = path.substr(0, slash);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      throw Error(ErrorKind::kIo, prefix + ": cannot create the cache directory: " + errno_text());
    }
    if (slash == std::string::npos) break;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw Error(ErrorKind::kIo, path + ": not a directory");
  }
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

class DirectoryCache final : public CacheStore {
 public:
  explicit DirectoryCache(std::string directory) : directory_(std::move(directory)) {
    while (directory_.size() > 1 && directory_.back() == '/') directory_.pop_back();
    if (directory_.empty()) throw Error(ErrorKind::kInvalidArgument, "empty cache directory");
    make_directories(directory_);
  }

  bool read(const std::string& name, uint64_t offset, void* dst, size_t length) override {
    Fd fd(::open(path(name).c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.get() < 0) return false;
    auto* out = static_cast<uint8_t*>(dst);
    for (size_t done = 0; done < length;) {
      const ssize_t n = ::pread(fd.get(), out + done, length - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  void write(const std::string& name, uint64_t offset, const void* src, size_t length) override {
    const std::string file = path(name);
    Fd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    if (fd.get() < 0) throw Error(ErrorKind::kIo, file + ": cannot open for writing: " + errno_text());
    const auto* in = static_cast<const uint8_t*>(src);
    for (size_t done = 0; done < length;) {
      const ssize_t n = ::pwrite(fd.get(), in + done, length - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        throw Error(ErrorKind::kIo, file + ": cannot write " + std::to_string(length) +
                                        " bytes at offset " + std::to_string(offset) + ": " +
                                        (n == 0 ? std::string("no progress") : errno_text()));
      }
      done += static_cast<size_t>(n);
    }
  }

  std::vector<std::pair<std::string, uint64_t>> list() override {
    std::vector<std::pair<std::string, uint64_t>> entries;
    DIR* dir = ::opendir(directory_.c_str());
    if (dir == nullptr) throw Error(ErrorKind::kIo, directory_ + ": cannot list: " + errno_text());
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (!valid_name(name)) continue;
      struct stat st {};
      if (::stat(path(name).c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        entries.emplace_back(name, static_cast<uint64_t>(st.st_size));
      }
    }
    ::closedir(dir);
    return entries;
  }

  void remove(const std::string& name) override {
    const std::string file = path(name);
    if (::unlink(file.c_str()) != 0 && errno != ENOENT) {
      throw Error(ErrorKind::kIo, file + ": cannot delete: " + errno_text());
    }
  }

 private:
  static bool valid_name(const std::string& name) {
    if (name.empty() || name == "." || name == "..") return false;
    for (unsigned char c : name) {
      if (!(std::isalnum(c) || c == '.' || c == '_' || c == '-')) return false;
    }
    return true;
  }

  std::string path(const std::string& name) const {
    if (!valid_name(name)) {
      throw Error(ErrorKind::kInvalidArgument, "'" + name + "' is not a valid cache file name");
    }
    return directory_ + "/" + name;
  }

  std::string directory_;
};

}  // namespace

std::shared_ptr<CacheStore> make_directory_cache(const std::string& directory) {
  return std::make_shared<DirectoryCache>(directory);
}

}  // namespace sipllm
