#include "vocab_cases.h"

#include <cstdio>
#include <stdexcept>

#include "test_support.h"

namespace sipllm::test {

std::string fixture_path(const std::string& relative) {
  return std::string(SIPLLM_FIXTURES_DIR) + "/" + relative;
}

std::string vocab_fixture_path(const std::string& name) {
  return std::string(SIPLLM_VOCAB_DIR) + "/ggml-vocab-" + name + ".gguf";
}

std::vector<VocabCase> read_vocab_cases(const std::string& inp_path, const std::string& out_path) {
  const std::string inp = read_file(inp_path);
  const std::string out = read_file(out_path);
  const std::string separator = "\n__ggml_vocab_test__\n";

  std::vector<std::string> texts;
  size_t pos = 0;
  while (pos < inp.size()) {
    const size_t next = inp.find(separator, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + separator.size();
  }

  std::vector<std::vector<int32_t>> id_lines;
  size_t line_start = 0;
  while (line_start < out.size()) {
    size_t line_end = out.find('\n', line_start);
    if (line_end == std::string::npos) line_end = out.size();
    std::vector<int32_t> ids;
    const std::string line = out.substr(line_start, line_end - line_start);
    size_t p = 0;
    while (p < line.size()) {
      while (p < line.size() && line[p] == ' ') ++p;
      size_t q = p;
      while (q < line.size() && line[q] != ' ') ++q;
      if (q > p) ids.push_back(std::stoi(line.substr(p, q - p)));
      p = q;
    }
    id_lines.push_back(ids);
    line_start = line_end + 1;
  }

  if (texts.size() != id_lines.size()) {
    throw std::runtime_error(inp_path + " has " + std::to_string(texts.size()) + " cases but " + out_path +
                             " has " + std::to_string(id_lines.size()) + " lines");
  }
  std::vector<VocabCase> cases;
  for (size_t i = 0; i < texts.size(); ++i) cases.push_back({texts[i], id_lines[i]});
  return cases;
}

std::string escape(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string ids_to_string(const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) out += (out.empty() ? "" : " ") + std::to_string(id);
  return out;
}

}  // namespace sipllm::test
