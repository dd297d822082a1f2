// Bad model files: each gives one clear Error naming what is wrong, never a
// crash or a huge allocation.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>

#include "model/gguf.h"
#include "model/model_description.h"
#include "sipllm/engine.h"
#include "test_support.h"

namespace sipllm {
namespace {

struct Failure {
  ErrorKind kind;
  std::string message;
};

Failure open_failure(std::vector<uint8_t> bytes) {
  try {
    Engine::open(make_memory_source(std::move(bytes), "bad.gguf"));
  } catch (const Error& e) {
    return {e.kind(), e.what()};
  }
  ADD_FAILURE() << "the model opened";
  return {ErrorKind::kIo, ""};
}

void expect_failure(std::vector<uint8_t> bytes, ErrorKind kind, const std::string& names) {
  const Failure f = open_failure(std::move(bytes));
  EXPECT_EQ(f.kind, kind) << f.message;
  EXPECT_NE(f.message.find(names), std::string::npos) << "message: " << f.message;
}

template <typename T>
void poke(std::vector<uint8_t>& bytes, size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

TEST(BadInput, TheGoodFileOpens) {
  EXPECT_NO_THROW(Engine::open(make_memory_source(test::random_llama_bytes())));
}

TEST(BadInput, WrongMagic) {
  auto bytes = test::random_llama_bytes();
  bytes[0] = 'X';
  expect_failure(bytes, ErrorKind::kFormat, "wrong magic at offset 0");
}

TEST(BadInput, UnknownVersion) {
  auto bytes = test::random_llama_bytes();
  poke<uint32_t>(bytes, 4, 7);
  expect_failure(bytes, ErrorKind::kUnsupported, "GGUF version 7");
  poke<uint32_t>(bytes, 4, 1);
  expect_failure(bytes, ErrorKind::kUnsupported, "GGUF version 1");
}

TEST(BadInput, Version2Reads) {
  // Versions 2 and 3 share the layout this engine reads.
  auto bytes = test::random_llama_bytes();
  poke<uint32_t>(bytes, 4, 2);
  EXPECT_NO_THROW(Engine::open(make_memory_source(bytes)));
}

TEST(BadInput, TruncatedAnywhereInTheHeaderIsAnErrorNotACrash) {
  const auto bytes = test::random_llama_bytes();
  auto source = make_memory_source(bytes);
  const uint64_t data_offset = GgufFile::parse(*source).data_offset();
  // Every cut inside the header, and a few inside the tensor data.
  for (uint64_t cut = 0; cut < data_offset + 4096; cut += cut < data_offset ? 1 : 97) {
    std::vector<uint8_t> truncated(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut));
    const Failure f = open_failure(std::move(truncated));
    EXPECT_TRUE(f.kind == ErrorKind::kFormat) << "cut at " << cut << ": " << f.message;
    EXPECT_FALSE(f.message.empty());
  }
}

TEST(BadInput, TruncatedFileNamesOffsetAndSize) {
  auto bytes = test::random_llama_bytes();
  bytes.resize(bytes.size() - 100);
  // The last tensor's data now runs past the end.
  expect_failure(bytes, ErrorKind::kFormat, "lies outside the file");
}

TEST(BadInput, TensorDataOutsideTheFile) {
  auto bytes = test::random_llama_bytes();
  // A tensor info is: name (u64 length + bytes), n_dims (u32), dims (u64
  // each), type (u32), offset (u64). The name occurs once in the file.
  const std::string name = "blk.1.attn_q.weight";
  const auto at = std::search(bytes.begin(), bytes.end(), name.begin(), name.end());
  ASSERT_NE(at, bytes.end());
  const size_t field = static_cast<size_t>(at - bytes.begin()) + name.size() + 4 + 2 * 8 + 4;
  poke<uint64_t>(bytes, field, uint64_t{1} << 40);
  expect_failure(bytes, ErrorKind::kFormat, "tensor 'blk.1.attn_q.weight': data at offset");
}

TEST(BadInput, ShapeThatContradictsTheHyperParameters) {
  GgufWriter writer = test::random_llama_writer();
  writer.set_uint32("llama.feed_forward_length", 100);  // the file's FFN has 160 rows
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "tensor 'blk.0.ffn_gate.weight' has shape [64, 160]");
}

TEST(BadInput, UnsupportedTensorType) {
  GgufWriter writer = test::random_llama_writer();
  // An IQ2_XXS tensor (type 16) of 256 elements: 66 bytes.
  writer.add_tensor("blk.0.extra.weight", {256}, 16, 66, [](std::vector<uint8_t>& out) { out.assign(66, 0); });
  expect_failure(writer.to_bytes(), ErrorKind::kUnsupported, "tensor 'blk.0.extra.weight' has type IQ2_XXS");
}

TEST(BadInput, UnsupportedArchitectureListsTheSupportedOnes) {
  GgufWriter writer = test::random_llama_writer();
  writer.set_string("general.architecture", "mamba");
  const Failure f = open_failure(writer.to_bytes());
  EXPECT_EQ(f.kind, ErrorKind::kUnsupported);
  EXPECT_NE(f.message.find("architecture 'mamba' (general.architecture) is not supported; this engine runs llama, "
                           "qwen2, qwen3, gemma2, gemma3"),
            std::string::npos)
      << f.message;
  for (const Family& family : supported_families()) {
    EXPECT_NE(f.message.find(family.architecture), std::string::npos) << family.architecture << ": " << f.message;
  }
}

TEST(BadInput, EveryFamilyOpens) {
  for (const Family& family : supported_families()) {
    EXPECT_NO_THROW(Engine::open(make_memory_source(test::random_family_writer(family.architecture).to_bytes())))
        << family.architecture;
  }
}

// The hybrid families' recurrent layers: tiny qwen35 (layers 0-2 DeltaNet,
// key heads 2, value heads 4 of 16, conv kernel 4) and lfm2 (layer 2
// attends, the others are short convolutions of 3).
TEST(BadInput, ARecurrentLayersMissingTensorIsNamed) {
  GgufWriter writer = test::random_family_writer("qwen35");
  ASSERT_TRUE(writer.remove_tensor("blk.1.ssm_a"));
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "missing tensor 'blk.1.ssm_a'");
  // Layer 3 made recurrent: it has attention's tensors, not DeltaNet's.
  writer = test::random_family_writer("qwen35");
  writer.set_uint32("qwen35.full_attention_interval", 5);
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "missing tensor 'blk.3.attn_qkv.weight'");
  writer = test::random_family_writer("lfm2");
  ASSERT_TRUE(writer.remove_tensor("blk.0.shortconv.conv.weight"));
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "missing tensor 'blk.0.shortconv.conv.weight'");
}

TEST(BadInput, AConvolutionLengthOrStateSizeThatContradictsTheTensors) {
  GgufWriter writer = test::random_family_writer("qwen35");
  writer.set_uint32("qwen35.ssm.conv_kernel", 3);
  expect_failure(writer.to_bytes(), ErrorKind::kFormat,
                 "tensor 'blk.0.ssm_conv1d.weight' has shape [4, 128], expected [3, 128]");
  writer = test::random_family_writer("qwen35");
  writer.set_uint32("qwen35.ssm.state_size", 8);
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "tensor 'blk.0.attn_qkv.weight' has shape [64, 128]");
  writer = test::random_family_writer("lfm2");
  writer.set_uint32("lfm2.shortconv.l_cache", 5);
  expect_failure(writer.to_bytes(), ErrorKind::kFormat,
                 "tensor 'blk.0.shortconv.conv.weight' has shape [3, 64], expected [5, 64]");
  writer.set_uint32("lfm2.shortconv.l_cache", 1000);
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "lfm2.shortconv.l_cache) is more than the 16");
}

TEST(BadInput, AnInconsistentHeadSplitIsNamed) {
  GgufWriter writer = test::random_family_writer("qwen35");
  writer.set_uint32("qwen35.ssm.time_step_rank", 3);  // 64 values in 3 heads
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "qwen35.ssm.inner_size 64 must split evenly into");
  writer = test::random_family_writer("qwen35");
  writer.set_uint32("qwen35.ssm.group_count", 3);  // 4 value heads over 3 key heads
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "a multiple of qwen35.ssm.group_count 3 key heads");
  writer = test::random_family_writer("lfm2");
  writer.set_int32_array("lfm2.attention.head_count_kv", {0, 0, 2});
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "lfm2.attention.head_count_kv has 3 entries for 4 layers");
  writer.set_int32_array("lfm2.attention.head_count_kv", {0, 1, 2, 0});
  expect_failure(writer.to_bytes(), ErrorKind::kUnsupported,
                 "lfm2.attention.head_count_kv gives the attention layers different head counts");
}

// Gemma 4: the fixture (layers 0-3 and 5-8 slide, layers 5-9 share the K/V
// of layers 3 and 4, per-layer inputs of 64 for 10 layers) rebuilt, all but
// `without` of its tensors copied as they are.
GgufWriter gemma4_fixture(const std::string& without = "") {
  auto source = open_file_source(std::string(SIPLLM_FIXTURES_DIR) + "/arch/gemma4-Q8_0.gguf");
  const GgufFile file = GgufFile::parse(*source);
  GgufWriter writer;
  for (const auto& [key, value] : file.metadata()) writer.set_value(key, value);
  for (const GgufTensorInfo& t : file.tensors()) {
    if (t.name == without) continue;
    std::vector<uint8_t> data(t.bytes);
    source->read(t.offset, data.data(), data.size());
    writer.add_tensor(t.name, t.dims, t.type, std::move(data));
  }
  return writer;
}

TEST(BadInput, Gemma4TheFixtureRebuiltOpens) {
  EXPECT_NO_THROW(Engine::open(make_memory_source(gemma4_fixture().to_bytes())));
}

TEST(BadInput, Gemma4PerLayerEmbeddingsThatDoNotFitTheLayers) {
  // Nine layers' worth of 64 floats per token, for ten layers.
  GgufWriter writer = gemma4_fixture("per_layer_token_embd.weight");
  writer.add_tensor("per_layer_token_embd.weight", {576, 512}, TensorType::kF32,
                    std::vector<uint8_t>(576 * 512 * 4, 0));
  expect_failure(writer.to_bytes(), ErrorKind::kFormat,
                 "tensor 'per_layer_token_embd.weight' has shape [576, 512], expected [640, 512]: 64 "
                 "(gemma4.embedding_length_per_layer_input) for each of the 10 layers");
  expect_failure(gemma4_fixture("per_layer_token_embd.weight").to_bytes(), ErrorKind::kFormat,
                 "missing tensor 'per_layer_token_embd.weight'");
  // The projection into them is sized by the same key.
  writer = gemma4_fixture();
  writer.set_uint32("gemma4.embedding_length_per_layer_input", 32);
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "tensor 'blk.0.inp_gate.weight' has shape [256, 64]");
}

TEST(BadInput, Gemma4SharedKvLayersBeyondTheLayers) {
  GgufWriter writer = gemma4_fixture();
  for (uint32_t shared : {10u, 12u, 1000000u}) {
    writer.set_uint32("gemma4.attention.shared_kv_layers", shared);
    expect_failure(writer.to_bytes(), ErrorKind::kFormat,
                   "metadata key 'gemma4.attention.shared_kv_layers' = " + std::to_string(shared) +
                       " leaves none of the 10 layers (gemma4.block_count) computing keys and values of its own");
  }
  // Six: full-attention layer 4 would reuse layer 3's, which slides.
  writer.set_uint32("gemma4.attention.shared_kv_layers", 6);
  expect_failure(writer.to_bytes(), ErrorKind::kFormat,
                 "layer 4 (full attention), one of the last 6 (gemma4.attention.shared_kv_layers), would attend "
                 "over the keys and values of layer 3, which is not a full attention layer with heads of 512");
}

TEST(BadInput, Gemma4PerLayerArraysOfTheWrongLength) {
  GgufValue pattern;
  pattern.type = GgufType::kArray;
  pattern.element_type = GgufType::kBool;
  pattern.integers = {1, 1, 1, 1, 0, 1, 1, 1, 1};
  GgufWriter writer = gemma4_fixture();
  writer.set_value("gemma4.attention.sliding_window_pattern", pattern);
  expect_failure(writer.to_bytes(), ErrorKind::kFormat,
                 "gemma4.attention.sliding_window_pattern has 9 entries for 10 layers (gemma4.block_count)");
  writer.remove("gemma4.attention.sliding_window_pattern");
  expect_failure(writer.to_bytes(), ErrorKind::kFormat,
                 "missing required metadata key 'gemma4.attention.sliding_window_pattern'");
  writer = gemma4_fixture();
  writer.set_int32_array("gemma4.feed_forward_length", {512, 512, 512, 512, 512, 1024, 1024, 1024, 1024, 1024, 1024});
  expect_failure(writer.to_bytes(), ErrorKind::kFormat,
                 "gemma4.feed_forward_length has 11 entries for 10 layers (gemma4.block_count)");
  // The right length with a wrong width names the tensor that disagrees.
  writer.set_int32_array("gemma4.feed_forward_length", {512, 512, 512, 512, 512, 512, 1024, 1024, 1024, 1024});
  expect_failure(writer.to_bytes(), ErrorKind::kFormat,
                 "tensor 'blk.5.ffn_gate.weight' has shape [256, 1024], expected [256, 512]");
}

TEST(BadInput, Gemma4ProportionalRopeFactorsAreRequired) {
  expect_failure(gemma4_fixture("rope_freqs.weight").to_bytes(), ErrorKind::kFormat,
                 "missing tensor 'rope_freqs.weight'");
}

// A file of one family relabelled as another: its keys move to the new
// prefix, its tensors stay what they were.
GgufWriter relabelled(const std::string& from, const std::string& to) {
  GgufWriter writer = test::random_family_writer(from);
  writer.set_string("general.architecture", to);
  for (const std::string& key : writer.keys()) {
    if (key.rfind(from + ".", 0) == 0) writer.rename(key, to + key.substr(from.size()));
  }
  return writer;
}

TEST(BadInput, AFamilysRequiredTensorMissing) {
  expect_failure(relabelled("llama", "qwen2").to_bytes(), ErrorKind::kFormat, "missing tensor 'blk.0.attn_q.bias'");
  // qwen3 has per-head norms where qwen2 has biases.
  expect_failure(relabelled("qwen2", "qwen3").to_bytes(), ErrorKind::kFormat,
                 "missing tensor 'blk.0.attn_q_norm.weight'");
}

TEST(BadInput, ATensorTheFamilyDoesNotUseIsRefused) {
  expect_failure(relabelled("qwen2", "llama").to_bytes(), ErrorKind::kUnsupported,
                 "tensor 'blk.0.attn_q.bias' is not part of the llama architecture");
  expect_failure(relabelled("gemma2", "llama").to_bytes(), ErrorKind::kUnsupported,
                 "post_attention_norm.weight' is not part of the llama architecture");
}

TEST(BadInput, AFamilysShapeThatContradictsItsKeys) {
  GgufWriter writer = test::random_family_writer("qwen3");
  writer.set_uint32("qwen3.attention.key_length", 8);  // the heads are 16 wide
  writer.set_uint32("qwen3.attention.value_length", 8);
  writer.set_uint32("qwen3.rope.dimension_count", 8);
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "tensor 'blk.0.attn_q.weight' has shape [64, 64], expected [64, 32]");
}

TEST(BadInput, AFamilysMissingKeyIsNamed) {
  GgufWriter writer = test::random_family_writer("gemma3");
  writer.remove("gemma3.attention.head_count");
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "missing required metadata key 'gemma3.attention.head_count'");
}

// A block count far beyond the file's tensors is refused at once, before
// anything is made per block (a fuzzed file asked for a billion blocks).
TEST(BadInput, ABlockCountBeyondTheTensorsIsRefused) {
  GgufWriter writer = test::random_family_writer("qwen3");
  writer.set_uint32("qwen3.block_count", 1u << 30);
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "qwen3.block_count 1073741824 is more blocks than the file's");
}

TEST(BadInput, WindowAndSoftCapsMustBeFinitePositiveNumbers) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const float bad : {nan, inf, 0.0f, -4.0f}) {
    GgufWriter writer = test::random_family_writer("gemma2");
    writer.set_float32("gemma2.attention.sliding_window", bad);
    expect_failure(writer.to_bytes(), ErrorKind::kFormat, "metadata key 'gemma2.attention.sliding_window'");
    for (const char* key : {"gemma2.attn_logit_softcapping", "gemma2.final_logit_softcapping"}) {
      writer = test::random_family_writer("gemma2");
      writer.set_float32(key, bad);
      expect_failure(writer.to_bytes(), ErrorKind::kFormat, std::string("metadata key '") + key + "'");
    }
  }
  GgufWriter writer = test::random_family_writer("gemma2");
  writer.set_float32("gemma2.attention.sliding_window", 4.5f);
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "must be a whole number of positions");
}

TEST(BadInput, UnsupportedRopeScalingIsRefusedNotIgnored) {
  GgufWriter writer = test::random_llama_writer();
  writer.set_string("llama.rope.scaling.type", "yarn");
  expect_failure(writer.to_bytes(), ErrorKind::kUnsupported, "llama.rope.scaling.type 'yarn' is not supported");
}

TEST(BadInput, NonFiniteRopeFactorsAreRefused) {
  GgufWriter writer = test::random_llama_writer();
  writer.add_tensor("rope_freqs.weight", {8}, 0, 32, [](std::vector<uint8_t>& out) {
    std::vector<float> f(8, 1.0f);
    f[3] = std::numeric_limits<float>::infinity();
    out.resize(32);
    std::memcpy(out.data(), f.data(), 32);
  });
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "tensor 'rope_freqs.weight' element 3");
}

TEST(BadInput, MissingRequiredKey) {
  GgufWriter writer = test::random_llama_writer();
  writer.remove("llama.attention.head_count");
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "missing required metadata key 'llama.attention.head_count'");
  writer = test::random_llama_writer();
  writer.remove("llama.attention.layer_norm_rms_epsilon");
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "llama.attention.layer_norm_rms_epsilon");
}

TEST(BadInput, KeyOfTheWrongType) {
  GgufWriter writer = test::random_llama_writer();
  writer.set_string("llama.block_count", "four");
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "metadata key 'llama.block_count' has type string");
}

TEST(BadInput, MissingTensor) {
  GgufWriter writer = test::random_llama_writer();
  writer.set_uint32("llama.block_count", 5);  // the file has 4 blocks
  expect_failure(writer.to_bytes(), ErrorKind::kFormat, "missing tensor 'blk.4.attn_norm.weight'");
}

TEST(BadInput, HugeCountsAreRejectedBeforeAllocating) {
  auto bytes = test::random_llama_bytes();
  poke<uint64_t>(bytes, 8, uint64_t{1} << 60);  // tensor count
  expect_failure(bytes, ErrorKind::kFormat, "tensor count");
  bytes = test::random_llama_bytes();
  poke<uint64_t>(bytes, 16, uint64_t{1} << 60);  // metadata count
  expect_failure(bytes, ErrorKind::kFormat, "metadata count");
  // The first key's length.
  bytes = test::random_llama_bytes();
  poke<uint64_t>(bytes, 24, uint64_t{1} << 62);
  expect_failure(bytes, ErrorKind::kFormat, "past the end of the file");
}

TEST(BadInput, HugeArrayLengthIsRejected) {
  GgufWriter writer = test::random_llama_writer();
  writer.set_int32_array("zz.array", {1, 2, 3});
  auto bytes = writer.to_bytes();
  // Find the array's count (3, uint64) right after its element type (int32 = 5).
  for (size_t i = 0; i + 12 <= bytes.size(); ++i) {
    uint32_t type;
    uint64_t count;
    std::memcpy(&type, bytes.data() + i, 4);
    std::memcpy(&count, bytes.data() + i + 4, 8);
    int32_t first;
    std::memcpy(&first, bytes.data() + i + 12, 4);
    if (type == 5 && count == 3 && first == 1) {
      poke<uint64_t>(bytes, i + 4, uint64_t{1} << 61);
      break;
    }
  }
  expect_failure(bytes, ErrorKind::kFormat, "metadata key 'zz.array': array of");
}

TEST(BadInput, NotAFileAtAll) {
  try {
    Engine::open(open_file_source(test::model_path("does-not-exist.gguf")));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("does-not-exist.gguf"), std::string::npos);
  }
  // A llama2.c checkpoint is not GGUF.
  expect_failure(std::vector<uint8_t>(1000, 0), ErrorKind::kFormat, "not a GGUF file");
}

// The CLI reports a bad model in one line and exits non-zero.
TEST(BadInput, CliExitsNonZeroWithOneLine) {
  const std::string path = testing::TempDir() + "/bad-magic.gguf";
  auto bytes = test::random_llama_bytes();
  bytes[1] = 'X';
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  const std::string command = std::string(SIPLLM_CLI_PATH) + " run -m " + path + " -p hi -n 4 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[256];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
  const int status = pclose(pipe);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_EQ(output, "sipllm: format error: " + path + ": not a GGUF file (wrong magic at offset 0)\n");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace sipllm
