// Split models (llama.cpp's gguf-split): the naming rule, the writer's
// layout, a split set read as one model with the same logits as the file it
// was split from, the errors of a bad set; and tensors past 4 GiB in sparse
// files, split or not.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "sipllm/engine.h"
#include "sipllm/error.h"
#include "sipllm/gguf_split.h"
#include "sipllm/weight_source.h"
#include "test_support.h"

namespace sipllm {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kPast4GiB = (4ull << 30) + (512ull << 20);  // 4.5 GiB

const char* const kPrompt = "Once upon a time, there was a little girl named Lily.";

struct Output {
  std::string text;
  std::vector<float> logits;
};

Output run(std::unique_ptr<WeightSource> source, const EngineOptions& options = {}) {
  auto engine = Engine::open(std::move(source), options);
  const std::vector<int32_t> prompt = engine->tokenize(kPrompt);
  Output out;
  out.logits = engine->evaluate(prompt, /*all_positions=*/true);
  engine->reset();
  out.text = test::generate_text(*engine, prompt, test::greedy(16));
  return out;
}

void expect_identical(const Output& got, const Output& want) {
  EXPECT_EQ(got.text, want.text);
  ASSERT_EQ(got.logits.size(), want.logits.size());
  EXPECT_EQ(std::memcmp(got.logits.data(), want.logits.data(), want.logits.size() * sizeof(float)), 0)
      << "logits differ from the unsplit file's";
}

std::unique_ptr<WeightSource> open_split_files(const std::string& first) {
  return open_split_model(open_file_source(first), first,
                          [](const std::string& name) { return open_file_source(name); });
}

// A fresh folder per test, removed after it.
class SplitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempDir() + "/split-" + std::to_string(::getpid()) + "-" +
           testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // stories260K split into `parts` as PREFIX-0000k-of-0000N.gguf in the folder.
  std::string split_stories(const std::string& prefix, int parts, uint64_t gap = 0) const {
    auto source = open_file_source(test::model_path("stories260K.gguf"));
    write_split_model(*source, path(prefix), parts, gap);
    return split_part_name(path(prefix), 0, parts);
  }

  std::string dir_;
};

// A hand-made part: the split keys and small F32 tensors named `tensors`.
void write_part(const std::string& file, int index, int count, int total, const std::vector<std::string>& tensors) {
  GgufWriter writer;
  writer.set_uint16("split.no", static_cast<uint16_t>(index));
  writer.set_uint16("split.count", static_cast<uint16_t>(count));
  writer.set_int32("split.tensors.count", total);
  for (const std::string& name : tensors) {
    writer.add_tensor(name, {8}, TensorType::kF32, std::vector<uint8_t>(32, 1));
  }
  writer.write_file(file);
}

// ---- Names ----------------------------------------------------------------------

TEST(SplitNames, FollowLlamaCppsRule) {
  EXPECT_EQ(split_part_name("models/qwen", 0, 3), "models/qwen-00001-of-00003.gguf");
  EXPECT_EQ(split_part_name("m", 11, 12), "m-00012-of-00012.gguf");
  const auto file = parse_split_name("dir/x-00002-of-00003.gguf", 1, 3);
  ASSERT_TRUE(file.has_value());
  EXPECT_EQ(file->prefix, "dir/x");
  EXPECT_FALSE(parse_split_name("dir/x-00002-of-00003.gguf", 0, 3).has_value());
  EXPECT_FALSE(parse_split_name("x-00001-of-00003.gguf", 0, 2).has_value());
  EXPECT_FALSE(parse_split_name("x.gguf", 0, 1).has_value());
  // A URL keeps its query at the end of every part's name.
  const auto url = parse_split_name("https://h/r/m-00001-of-00002.gguf?download=true", 0, 2);
  ASSERT_TRUE(url.has_value());
  EXPECT_EQ(split_part_name(url->prefix, 1, 2, url->query), "https://h/r/m-00002-of-00002.gguf?download=true");
}

// ---- The writer -------------------------------------------------------------------

TEST_F(SplitTest, WriterLaysPartsOutAsGgufSplitDoes) {
  const std::string first = split_stories("stories", 3);
  auto original_source = open_file_source(test::model_path("stories260K.gguf"));
  const GgufFile original = GgufFile::parse(*original_source);
  size_t tensors = 0;
  for (int k = 0; k < 3; ++k) {
    auto source = open_file_source(split_part_name(path("stories"), k, 3));
    const GgufFile part = GgufFile::parse(*source);
    EXPECT_EQ(part.find("split.no")->type, GgufType::kUint16);
    EXPECT_EQ(part.find("split.count")->type, GgufType::kUint16);
    EXPECT_EQ(part.find("split.tensors.count")->type, GgufType::kInt32);
    EXPECT_EQ(part.require_uint("split.no"), static_cast<uint64_t>(k));
    EXPECT_EQ(part.require_uint("split.count"), 3u);
    EXPECT_EQ(part.require_uint("split.tensors.count"), original.tensors().size());
    // The first part has the model's metadata; the others only the split keys.
    EXPECT_EQ(part.metadata().size(), k == 0 ? original.metadata().size() + 3 : 3u);
    EXPECT_GT(part.tensors().size(), 0u);
    for (const GgufTensorInfo& t : part.tensors()) {
      const GgufTensorInfo& o = original.tensors()[tensors++];
      EXPECT_EQ(t.name, o.name) << "tensors keep their order";
      EXPECT_EQ(t.dims, o.dims);
    }
  }
  EXPECT_EQ(tensors, original.tensors().size());
}

// ---- Read as one model ---------------------------------------------------------------

TEST_F(SplitTest, SplitModelGivesTheUnsplitLogitsBitForBit) {
  const Output want = run(open_file_source(test::model_path("stories260K.gguf")));
  for (int parts : {2, 5}) {
    SCOPED_TRACE(std::to_string(parts) + " parts");
    const std::string first = split_stories("s" + std::to_string(parts), parts);
    expect_identical(run(open_split_files(first)), want);
    // Nothing resident, tensors streamed through the ring across parts; and a
    // memory map per part.
    EngineOptions streamed;
    streamed.loader.memory_budget = 0;
    expect_identical(run(open_split_files(first), streamed), want);
    expect_identical(run(open_split_model(open_mmap_source(first), first,
                                          [](const std::string& n) { return open_mmap_source(n); })),
                     want);
  }
}

TEST_F(SplitTest, UnsplitFileIsReturnedAsItIs) {
  auto source = open_file_source(test::model_path("stories260K.gguf"));
  WeightSource* raw = source.get();
  bool opened_another = false;
  auto same = open_split_model(std::move(source), test::model_path("stories260K.gguf"), [&](const std::string&) {
    opened_another = true;
    return std::unique_ptr<WeightSource>();
  });
  EXPECT_EQ(same.get(), raw);
  EXPECT_FALSE(opened_another);
}

TEST_F(SplitTest, ReadsAcrossPartsAndReadManyMatchTheCombinedLayout) {
  const std::string first = split_stories("r", 3);
  auto split = open_split_files(first);
  const GgufFile combined = GgufFile::parse(*split);
  auto original_source = open_file_source(test::model_path("stories260K.gguf"));
  const GgufFile original = GgufFile::parse(*original_source);
  ASSERT_EQ(combined.tensors().size(), original.tensors().size());
  EXPECT_EQ(combined.find("split.count"), nullptr) << "the combined header is a plain GGUF";
  EXPECT_EQ(combined.metadata().size(), original.metadata().size());
  std::vector<WeightSource::ReadRequest> requests;
  std::vector<std::vector<uint8_t>> got(combined.tensors().size());
  for (size_t i = 0; i < combined.tensors().size(); ++i) {
    const GgufTensorInfo& t = combined.tensors()[i];
    got[i].resize(t.bytes);
    requests.push_back({t.offset, got[i].data(), got[i].size()});
  }
  split->read_many(requests);
  for (size_t i = 0; i < combined.tensors().size(); ++i) {
    const GgufTensorInfo& o = *original.find_tensor(combined.tensors()[i].name);
    std::vector<uint8_t> want(o.bytes);
    original_source->read(o.offset, want.data(), want.size());
    EXPECT_EQ(got[i], want) << o.name;
  }
  // One read over everything: the parts' data and the zeros between them.
  std::vector<uint8_t> all(split->size());
  split->read(0, all.data(), all.size());
  const GgufTensorInfo& last = combined.tensors().back();
  EXPECT_EQ(std::vector<uint8_t>(all.begin() + static_cast<long>(last.offset),
                                 all.begin() + static_cast<long>(last.offset + last.bytes)),
            got.back());
  EXPECT_THROW(split->read(split->size() - 1, all.data(), 2), Error);
}

// ---- Bad sets ----------------------------------------------------------------------

TEST_F(SplitTest, MissingPartIsNamed) {
  const std::string first = split_stories("m", 3);
  fs::remove(split_part_name(path("m"), 1, 3));
  const Error e = test::expect_error([&] { open_split_files(first); });
  EXPECT_EQ(e.kind(), ErrorKind::kIo);
  EXPECT_NE(std::string(e.what()).find("m-00002-of-00003.gguf (part 2 of 3"), std::string::npos) << e.what();
}

TEST_F(SplitTest, PartOfAnotherSplitIsRefused) {
  const std::string first = split_stories("a", 3);
  split_stories("b", 2);
  // Part 2 of a two-part split, standing in for part 2 of three: split.count.
  fs::copy_file(split_part_name(path("b"), 1, 2), split_part_name(path("a"), 1, 3),
                fs::copy_options::overwrite_existing);
  Error e = test::expect_error([&] { open_split_files(first); });
  EXPECT_EQ(e.kind(), ErrorKind::kFormat);
  EXPECT_NE(std::string(e.what()).find("a-00002-of-00003.gguf (part 2 of 3"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("one of 2 parts"), std::string::npos) << e.what();

  // Part 3 copied over part 2: split.no.
  split_stories("a", 3);
  fs::copy_file(split_part_name(path("a"), 2, 3), split_part_name(path("a"), 1, 3),
                fs::copy_options::overwrite_existing);
  e = test::expect_error([&] { open_split_files(first); });
  EXPECT_EQ(e.kind(), ErrorKind::kFormat);
  EXPECT_NE(std::string(e.what()).find("it says it is part 3 (split.no 2)"), std::string::npos) << e.what();
}

TEST_F(SplitTest, TensorCountAndDuplicatesAreChecked) {
  write_part(path("c-00001-of-00002.gguf"), 0, 2, 3, {"a", "b"});
  write_part(path("c-00002-of-00002.gguf"), 1, 2, 3, {"c", "d"});
  Error e = test::expect_error([&] { open_split_files(path("c-00001-of-00002.gguf")); });
  EXPECT_EQ(e.kind(), ErrorKind::kFormat);
  EXPECT_NE(std::string(e.what()).find("split.tensors.count says 3 tensors, but the parts hold 4"),
            std::string::npos) << e.what();

  write_part(path("c-00002-of-00002.gguf"), 1, 2, 3, {"b"});
  e = test::expect_error([&] { open_split_files(path("c-00001-of-00002.gguf")); });
  EXPECT_EQ(e.kind(), ErrorKind::kFormat);
  EXPECT_NE(std::string(e.what()).find("tensor 'b' is defined twice"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("c-00002-of-00002.gguf (part 2 of 2"), std::string::npos) << e.what();

  // Sound: three tensors in all.
  write_part(path("c-00002-of-00002.gguf"), 1, 2, 3, {"c"});
  auto split = open_split_files(path("c-00001-of-00002.gguf"));
  const GgufFile combined = GgufFile::parse(*split);
  ASSERT_EQ(combined.tensors().size(), 3u);
  std::vector<uint8_t> c(32);
  split->read(combined.find_tensor("c")->offset, c.data(), c.size());
  EXPECT_EQ(c, std::vector<uint8_t>(32, 1));
}

TEST_F(SplitTest, OpeningByAnotherNameThanTheFirstPartsIsRefused) {
  const std::string first = split_stories("n", 3);
  // By the second part: the error names the first.
  const std::string second = split_part_name(path("n"), 1, 3);
  Error e = test::expect_error([&] { open_split_files(second); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("is part 2 of 3"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("n-00001-of-00003.gguf)"), std::string::npos) << e.what();
  // The first part renamed in gguf-split's form, but not as part 1 of 3:
  // the other names cannot be derived.
  fs::rename(first, path("renamed-00001-of-00004.gguf"));
  e = test::expect_error([&] { open_split_files(path("renamed-00001-of-00004.gguf")); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("does not end in -00001-of-00003.gguf"), std::string::npos) << e.what();
  // Renamed otherwise, it is not looked at as a split; the engine refuses it.
  fs::rename(path("renamed-00001-of-00004.gguf"), path("renamed.gguf"));
  e = test::expect_error([&] { Engine::open(open_split_files(path("renamed.gguf"))); });
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("part 1 of 3 of a split model"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("NAME-00001-of-00003.gguf"), std::string::npos) << e.what();
}

// ---- Past 4 GiB ---------------------------------------------------------------------

// The disk space a file takes (a sparse file takes little of its size).
uint64_t allocated_bytes(const std::string& file) {
  struct stat st {};
  EXPECT_EQ(::stat(file.c_str(), &st), 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

TEST_F(SplitTest, TensorsPast4GiBInASparseFileGiveTheSameLogits) {
  const Output want = run(open_file_source(test::model_path("stories260K.gguf")));
  // The model with a 4.5 GiB hole before its tensor data.
  auto source = open_file_source(test::model_path("stories260K.gguf"));
  const GgufFile original = GgufFile::parse(*source);
  GgufWriter writer(original.version() == 2 ? 2 : 3, original.alignment());
  for (const auto& [key, value] : original.metadata()) writer.set_value(key, value);
  for (const GgufTensorInfo& t : original.tensors()) {
    writer.add_tensor(t.name, t.dims, t.type_id, t.bytes, [&source, &t](std::vector<uint8_t>& bytes) {
      bytes.resize(t.bytes);
      source->read(t.offset, bytes.data(), bytes.size());
    });
  }
  writer.set_data_gap(kPast4GiB);
  const std::string far = path("far.gguf");
  writer.write_file(far);
  ASSERT_GT(fs::file_size(far), kPast4GiB);
  EXPECT_LT(allocated_bytes(far), 64u << 20) << "the gap should take no disk space";

  auto far_source = open_file_source(far);
  const GgufFile parsed = GgufFile::parse(*far_source);
  for (const GgufTensorInfo& t : parsed.tensors()) EXPECT_GT(t.offset, 4ull << 30) << t.name;
  expect_identical(run(open_file_source(far)), want);
  expect_identical(run(open_mmap_source(far)), want);

  // Split, each part with the gap: 9 GiB of address space.
  const std::string first = split_stories("far", 2, kPast4GiB);
  auto split = open_split_files(first);
  EXPECT_GT(split->size(), 2 * kPast4GiB);
  expect_identical(run(std::move(split)), want);
}

}  // namespace
}  // namespace sipllm
