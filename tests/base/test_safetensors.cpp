// safetensors read/write (harness/base/safetensors.h): round trips and corrupt files.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstring>

#include "harness/base/files.h"
#include "harness/base/safetensors.h"
#include "harness/base/tensor_file.h"

namespace parity {
namespace {

std::string with_header(const std::string& json, const std::string& data) {
  std::string out(8, '\0');
  const std::uint64_t n = json.size();
  std::memcpy(out.data(), &n, 8);
  return out + json + data;
}

std::string error_of(const std::string& bytes) {
  try {
    safetensors::parse(bytes, "f.safetensors");
  } catch (const safetensors::FormatError& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripKeepsEveryDtypeShapeAndBitAndMetadata) {
  std::vector<std::pair<std::string, at::Tensor>> in = {
      {"w", at::randn({3, 5}, at::kFloat)},
      {"d", at::randn({2}, at::kDouble)},
      {"b", at::randn({4, 1}).to(at::kBFloat16)},
      {"ids", at::arange(7, at::kLong)},
      {"empty", at::zeros({0, 3})},
      {"scalar", at::ones({}, at::kInt)},
  };
  const safetensors::Contents out =
      safetensors::parse(safetensors::serialize(in, {{"format", "pt"}}), "x");
  ASSERT_EQ(out.tensors.size(), in.size());
  for (const auto& [name, t] : in) {
    const at::Tensor* got = out.find(name);
    ASSERT_NE(got, nullptr) << name;
    EXPECT_EQ(got->scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(got->sizes(), t.sizes()) << name;
    EXPECT_TRUE(at::equal(*got, t)) << name;
  }
  EXPECT_EQ(out.metadata.at("format"), "pt");
}

TEST(Safetensors, WriteFileThenReadFile) {
  files::TempDir dir;
  const std::string path = dir.path() + "/w.safetensors";
  const at::Tensor t = at::randn({4, 4});
  safetensors::write_file(path, {{"t", t}});
  EXPECT_TRUE(at::equal(*safetensors::read_file(path).find("t"), t));
  EXPECT_TRUE(at::equal(read_tensor_file(path).at(0).second, t));
}

TEST(Safetensors, HeaderIsPaddedToEightBytes) {
  const std::string bytes = safetensors::serialize({{"a", at::ones({1})}});
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
}

TEST(Safetensors, CorruptFilesAreOneLineErrorsNamingTheProblem) {
  const std::string ok_header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NE(error_of("abc").find("fewer than the 8-byte header length"), std::string::npos);
  std::string huge = with_header(ok_header, std::string(8, '\0'));
  const std::uint64_t big = 1000;
  std::memcpy(huge.data(), &big, 8);
  EXPECT_NE(error_of(huge).find("past the end of the file"), std::string::npos);
  EXPECT_NE(error_of(with_header("[1,2]", "")).find("does not start with '{'"), std::string::npos);
  EXPECT_NE(error_of(with_header("{\"a\":", "")).find("not JSON"), std::string::npos);
  EXPECT_NE(error_of(with_header(R"({"a":{"dtype":"F7","shape":[2],"data_offsets":[0,8]}})",
                                 std::string(8, '\0')))
                .find("dtype \"F7\""),
            std::string::npos);
  // Size mismatch: 2 F32 need 8 bytes, offsets say 4.
  const std::string short_range = error_of(with_header(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", std::string(4, '\0')));
  EXPECT_NE(short_range.find("hold 4 bytes, F32 [2] needs 8"), std::string::npos) << short_range;
  // Offsets past the data.
  EXPECT_NE(error_of(with_header(ok_header, std::string(4, '\0'))).find("end past the data"),
            std::string::npos);
  // Overlap.
  const std::string overlap = error_of(with_header(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      std::string(12, '\0')));
  EXPECT_NE(overlap.find("overlap"), std::string::npos) << overlap;
  // A hole / trailing bytes.
  EXPECT_NE(error_of(with_header(ok_header, std::string(12, '\0'))).find("belong to no tensor"),
            std::string::npos);
  // Negative shape, unknown field, bad metadata.
  EXPECT_NE(error_of(with_header(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})",
                                 std::string(8, '\0')))
                .find("not a non-negative integer"),
            std::string::npos);
  EXPECT_NE(error_of(with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})",
                                 std::string(8, '\0')))
                .find("unknown field \"x\""),
            std::string::npos);
  EXPECT_NE(error_of(with_header(R"({"__metadata__":{"k":1}})", "")).find("is not a string"),
            std::string::npos);
  // Every message is one line and names the file.
  const std::string e = error_of("abc");
  EXPECT_EQ(e.find('\n'), std::string::npos);
  EXPECT_EQ(e.rfind("f.safetensors: safetensors: ", 0), 0u) << e;
}

TEST(TensorFile, MissingAndUnknownFilesAreNamed) {
  files::TempDir dir;
  try {
    read_tensor_file(dir.path() + "/none");
    FAIL() << "no error";
  } catch (const TensorFileError& e) {
    EXPECT_NE(std::string(e.what()).find("no such file"), std::string::npos);
  }
  files::write_atomically(dir.path() + "/junk", "this is not a tensor file");
  try {
    read_tensor_file(dir.path() + "/junk");
    FAIL() << "no error";
  } catch (const TensorFileError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("junk: text beginning \"this is not a tensor"), std::string::npos) << what;
    EXPECT_NE(what.find("expected a safetensors file or a torch.save (zip) file"),
              std::string::npos)
        << what;
  }
}

// The committed torch.save fixtures (tests/fixtures/weights/make_torch_save.py).
// __FILE__ is absolute, or (ccache's base_dir) relative to the build folder,
// which is the parent of the tests' working directory.
std::string fixture(const std::string& name) {
  const std::string here = __FILE__;
  const std::string path = here.substr(0, here.rfind('/')) + "/../fixtures/weights/" + name;
  return path[0] == '/' || files::exists(path) ? path : "../" + path;
}

TEST(TensorFile, TorchSaveDictOfTensorsIsReadAndNonTensorsAreSkipped) {
  ASSERT_TRUE(files::exists(fixture("plain_dict.pt"))) << fixture("plain_dict.pt");
  const NamedTensors t = read_tensor_file(fixture("plain_dict.pt"));
  ASSERT_EQ(t.size(), 2u);  // c._extra_state = None is skipped
  EXPECT_EQ(t[0].first, "a.weight");
  EXPECT_TRUE(at::equal(t[0].second, at::arange(6, at::kFloat).view({2, 3})));
  EXPECT_EQ(t[1].first, "b.bias");
  EXPECT_TRUE(at::equal(t[1].second, at::tensor({1.5, -2.0}, at::kDouble)));
}

TEST(TensorFile, ModelStateDictIsReadDespiteItsOrderedDictAttributes) {
  // model.state_dict() is an OrderedDict with _metadata: LibTorch 1.13's
  // unpickler asserted on it; parity's own pickle reader skips the attributes.
  const NamedTensors t = read_tensor_file(fixture("state_dict.pt"));
  ASSERT_EQ(t.size(), 2u);  // weight and bias of a Linear(2, 2)
  EXPECT_EQ(t[0].first, "weight");
  EXPECT_EQ(t[0].second.sizes(), (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(t[1].first, "bias");
}

}  // namespace
}  // namespace parity
