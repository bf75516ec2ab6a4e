// parity's restricted pickle reader (harness/base/pickle_reader.h) and the
// torch.save archive over it (harness/base/torch_save.h): values as Python
// writes them, unknown globals as opaque objects, and every malformed input
// (truncated, corrupted, a tensor view outside its storage) one error line,
// never a crash.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <cstring>

#include "harness/base/files.h"
#include "harness/base/pickle_reader.h"
#include "harness/base/torch_save.h"

namespace parity {
namespace {

using pickle::Pickle;
using pickle::PickleError;
using pickle::Value;
using Kind = Value::Kind;

// A pickle written opcode by opcode (protocol 2, as torch.save writes).
struct Bytes {
  std::string b = "\x80\x02";
  Bytes& op(char c) {
    b += c;
    return *this;
  }
  Bytes& u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) b += static_cast<char>((v >> (8 * i)) & 0xff);
    return *this;
  }
  Bytes& str(const std::string& s) {
    op('X').u32(static_cast<std::uint32_t>(s.size()));
    b += s;
    return *this;
  }
  Bytes& small(int v) { return op('K').op(static_cast<char>(v)); }  // BININT1
  Bytes& global(const std::string& module, const std::string& name) {
    op('c');
    b += module + "\n" + name + "\n";
    return *this;
  }
  // torch._utils._rebuild_tensor_v2(('storage', torch.<type>, key, 'cpu', numel), offset,
  // (sizes), (strides), False, OrderedDict())
  Bytes& tensor(const std::string& type, const std::string& key, int numel, int offset,
                std::vector<int> sizes, std::vector<int> strides) {
    global("torch._utils", "_rebuild_tensor_v2").op('(');
    op('(').str("storage").global("torch", type).str(key).str("cpu").small(numel).op('t').op('Q');
    small(offset).op('(');
    for (int s : sizes) small(s);
    op('t').op('(');
    for (int s : strides) small(s);
    op('t').op('\x89').global("collections", "OrderedDict").op(')').op('R').op('t').op('R');
    return *this;
  }
  std::string done() { return b + "."; }
};

TEST(PickleReader, ValuesAreReadAsPythonWroteThem) {
  Bytes p;
  p.op('}').op('q').op('\0').op('(');
  p.str("int").op('J').u32(static_cast<std::uint32_t>(-5));
  p.str("big").op('\x8a').op('\x09').b += std::string("\x01\0\0\0\0\0\0\0\x01", 9);  // 2**64 + 1
  p.str("neg").op('\x8a').op('\x01').op('\xff');                                     // LONG1 -1
  p.str("float").op('G').b += std::string("\x3f\xf8\0\0\0\0\0\0", 8);                // 1.5
  p.str("none").op('N').str("true").op('\x88');
  p.str("list").op(']').op('q').op('\x01').op('(').small(1).small(2).op('e');
  p.str("again").op('h').op('\x01');  // BINGET: the same list
  p.op('u');
  const Pickle pk(p.done());
  const Value& r = pk.root();
  ASSERT_EQ(r.kind, Kind::dict);
  EXPECT_EQ(r.get("int")->integer, -5);
  EXPECT_EQ(r.get("big")->kind, Kind::big_integer);
  EXPECT_EQ(r.get("neg")->integer, -1);
  EXPECT_EQ(r.get("float")->floating, 1.5);
  EXPECT_EQ(r.get("none")->kind, Kind::none);
  EXPECT_TRUE(r.get("true")->boolean);
  ASSERT_EQ(r.get("list")->items.size(), 2u);
  EXPECT_EQ(r.get("list")->items[1]->integer, 2);
  EXPECT_EQ(r.get("again"), r.get("list"));
  EXPECT_EQ(r.get("missing"), nullptr);
}

TEST(PickleReader, UnknownGlobalsAreOpaqueObjectsThatKeepTheirState) {
  // argparse.Namespace(num_layers=4) by NEWOBJ + BUILD; numpy's array by REDUCE;
  // an OrderedDict with _metadata (BUILD on a dict: ignored).
  Bytes p;
  p.op('(').str("args").global("argparse", "Namespace").op(')').op('\x81');
  p.op('}').str("num_layers").small(4).op('s').op('b');
  p.str("np").global("numpy.core.multiarray", "_reconstruct").op(')').op('R');
  p.str("sd").global("collections", "OrderedDict").op(')').op('R').str("w").small(1).op('s');
  p.op('}').str("_metadata").op('}').op('s').op('b');
  p.op('d');
  const Pickle pk(p.done());
  const Value* args = pk.root().get("args");
  ASSERT_NE(args, nullptr);
  EXPECT_EQ(args->kind_name(), "an argparse.Namespace object");
  EXPECT_EQ(args->get("num_layers")->integer, 4);
  EXPECT_EQ(pk.root().get("np")->text, "numpy.core.multiarray._reconstruct");
  EXPECT_EQ(pk.root().get("sd")->kind, Kind::dict);
  EXPECT_EQ(pk.root().get("sd")->get("w")->integer, 1);
}

TEST(PickleReader, ACycleIsHarmless) {
  Bytes p;  // l = []; l.append(l)
  p.op(']').op('q').op('\0').op('h').op('\0').op('a');
  const Pickle pk(p.done());
  EXPECT_EQ(pk.root().items.at(0), &pk.root());
}

TEST(PickleReader, MalformedPicklesAreOneLineErrors) {
  const auto error = [](const std::string& bytes) {
    try {
      Pickle p(bytes);
    } catch (const PickleError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error(std::string("\x80\x02X\x10\0\0\0ab", 9)),
            "truncated: 16 byte(s) needed at byte 7, 2 left");
  EXPECT_EQ(error("\x80\x02\xff."), "unknown opcode 0xff (opcode at byte 2)");
  EXPECT_EQ(error("\x80\x02h\x07."), "memo key 7 is not defined (opcode at byte 2)");
  EXPECT_EQ(error("\x80\x02."), "the stack is empty (opcode at byte 2)");
  EXPECT_EQ(error("\x80\x02]K\x01K\x02s."), "SETITEM on a list (opcode at byte 7)");
  EXPECT_EQ(error("\x80\x02(K\x01K\x02tQ."),
            "a persistent id that is not torch.save's ('storage', type, key, location, numel) "
            "(opcode at byte 8)");
  EXPECT_EQ(error("\x80\x02P0\n."), "unsupported opcode PERSID (opcode at byte 2)");
}

// A torch.save archive holding `pkl` and the records.
std::string archive(const std::string& pkl,
                    const std::vector<std::pair<std::string, std::string>>& records) {
  std::string out;
  {
    caffe2::serialize::PyTorchStreamWriter w([&](const void* data, size_t n) {
      out.append(static_cast<const char*>(data), n);
      return n;
    });
    w.writeRecord("data.pkl", pkl.data(), pkl.size());
    for (const auto& [name, data] : records) w.writeRecord(name, data.data(), data.size());
    w.writeEndOfFile();
  }
  return out;
}

std::string floats(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::string tensor_error(const std::string& zip) {
  try {
    top_level_tensors(TorchSaveFile(zip, "t.pt"));
  } catch (const TensorFileError& e) {
    return e.what();
  }
  return "no error";
}

TEST(TorchSaveFile, TensorsAreViewsOfTheirStorageRecords) {
  // Two tensors sharing one storage: w = s[0:4].view(2, 2), t = w.t() (strides 1, 2), at offset 1.
  Bytes p;
  p.op('}').op('(').str("w").tensor("FloatStorage", "0", 5, 0, {2, 2}, {2, 1});
  p.str("t").tensor("FloatStorage", "0", 5, 1, {2, 2}, {1, 2}).str("x").op('N').op('u');
  const NamedTensors t = top_level_tensors(
      TorchSaveFile(archive(p.done(), {{"data/0", floats({0, 1, 2, 3, 4})}}), "t.pt"));
  ASSERT_EQ(t.size(), 2u);  // x = None is skipped
  EXPECT_TRUE(at::equal(t[0].second, at::tensor({0.f, 1.f, 2.f, 3.f}).view({2, 2})));
  EXPECT_TRUE(at::equal(t[1].second, at::tensor({1.f, 3.f, 2.f, 4.f}).view({2, 2})));
  EXPECT_TRUE(t[1].second.is_contiguous());
}

TEST(TorchSaveFile, BadTensorsAndArchivesAreOneLineNamingTheFile) {
  const auto one = [](const std::string& type, int numel, int offset, std::vector<int> sizes,
                      std::vector<int> strides) {
    Bytes p;
    p.op('}').str("w").tensor(type, "0", numel, offset, sizes, strides).op('s');
    return p.done();
  };
  EXPECT_EQ(tensor_error(archive(one("FloatStorage", 4, 0, {2, 2}, {2, 1}), {})),
            "t.pt: a torch.save (zip) file without the record data/0 that holds w");
  EXPECT_EQ(tensor_error(archive(one("FloatStorage", 4, 0, {2, 2}, {2, 1}), {{"data/0", "ab"}})),
            "t.pt: a torch.save (zip) file whose record data/0 holds 2 bytes, w's storage needs "
            "4 x 4");
  EXPECT_EQ(tensor_error(archive(one("FloatStorage", 4, 1, {2, 2}, {2, 1}),
                                 {{"data/0", floats({0, 1, 2, 3})}})),
            "t.pt: a torch.save (zip) file whose w (size [2, 2], stride [2, 1], offset 1) lies "
            "outside its storage of 4 elements");
  EXPECT_EQ(tensor_error(archive(one("QUInt8Storage", 4, 0, {4}, {1}), {{"data/0", "abcd"}})),
            "t.pt: a torch.save (zip) file whose w has storage type QUInt8Storage, not read");
  EXPECT_EQ(tensor_error(archive(Bytes().op(']').done(), {})),
            "t.pt: a torch.save (zip) file holding a list, expected a dict of name -> tensor");
  std::string zip = archive(one("FloatStorage", 4, 0, {2, 2}, {2, 1}), {{"data/0", floats({})}});
  zip.resize(zip.size() / 2);
  const std::string cut = tensor_error(zip);
  EXPECT_EQ(cut.rfind("t.pt: a torch.save (zip) file that cannot be read as a zip archive: ", 0),
            0u)
      << cut;
  EXPECT_EQ(cut.find('\n'), std::string::npos) << cut;
}

// The data.pkl of a real checkpoint file (torch 2.11's torch.save of what
// Megatron-LM writes: args, model chunks with `_extra_state`, optimizer, RNG
// state, an int over 64 bits; 5 KB), cut at every byte and with every byte changed (flipped
// bits): each is read or a PickleError, nothing else.
TEST(PickleReader, EveryPrefixAndEveryCorruptedByteOfARealCheckpointIsReadOrOneError) {
  const std::string here = __FILE__;
  std::string path =
      here.substr(0, here.rfind('/')) +
      "/../fixtures/checkpoints/tp2_pp2_vpp2/iter_0000020/mp_rank_01_001/model_optim_rng.pt";
  if (path[0] != '/' && !files::exists(path)) path = "../" + path;
  ASSERT_TRUE(files::exists(path)) << path;
  caffe2::serialize::PyTorchStreamReader zip(path);
  const auto [data, size] = zip.getRecord("data.pkl");
  const std::string pkl(static_cast<const char*>(data.get()), size);
  ASSERT_NO_THROW(Pickle{pkl});
  int errors = 0;
  for (std::size_t n = 0; n < pkl.size(); ++n) {
    try {
      Pickle p(std::string_view(pkl).substr(0, n));
    } catch (const PickleError& e) {
      ++errors;
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
    }
  }
  EXPECT_EQ(errors, static_cast<int>(pkl.size()));  // no prefix reaches STOP
  for (std::size_t i = 0; i < pkl.size(); ++i) {
    std::string bad = pkl;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    try {
      Pickle p(bad);
    } catch (const PickleError&) {
    }
  }
}

}  // namespace
}  // namespace parity
