#include "model/gguf.h"

#include <gtest/gtest.h>

#include "sipllm/error.h"
#include "test_support.h"

namespace sipllm {
namespace {

TEST(Gguf, ReadsStories260KHeader) {
  auto source = open_file_source(test::model_path("stories260K.gguf"));
  GgufFile file = GgufFile::parse(*source);
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.alignment(), 32u);
  EXPECT_EQ(file.data_offset(), 14176u);
  EXPECT_EQ(file.tensors().size(), 48u);
  EXPECT_EQ(file.require_string("general.architecture"), "llama");
  EXPECT_EQ(file.require_uint("llama.embedding_length"), 64u);
  EXPECT_EQ(file.require_array("tokenizer.ggml.tokens", GgufType::kString).strings.size(), 512u);
  const GgufTensorInfo* embd = file.find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->dims, (std::vector<uint64_t>{64, 512}));
  EXPECT_EQ(embd->bytes, 64u * 512u * 4u);
}

}  // namespace
}  // namespace sipllm
