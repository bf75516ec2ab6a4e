#pragma once
// A restricted reader of Python pickles, for the data.pkl of a torch.save zip
// archive (harness/base/torch_save.h). It never runs code: the globals torch.save
// needs are understood (collections.OrderedDict, torch's tensor rebuild functions
// and storage types, set and frozenset); every other global (argparse.Namespace,
// numpy arrays, io.BytesIO, enums) becomes an opaque object keeping its type
// name, arguments and BUILD state, so a checkpoint's non-tensor entries can be
// read (a Namespace's attributes) or skipped. LibTorch's own unpickler rejects
// such globals (and asserts on an OrderedDict with attributes, which is what
// model.state_dict() returns). Values live in an arena owned by the Pickle:
// destruction is flat and a cyclic pickle is harmless. docs/weights.md.
#include <cstdint>
#include <deque>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace parity::pickle {

// One line: what is wrong and at which byte ("truncated: BINUNICODE needs 12
// bytes at byte 40, 3 left").
class PickleError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// torch.save's persistent id of a storage: ('storage', torch.<Type>Storage, key,
// location, numel); its bytes are the archive's record data/<key>.
struct StorageRef {
  std::string type;  // "FloatStorage"
  std::string key;
  std::int64_t numel = 0;
};

// torch._utils._rebuild_tensor_v2(storage, offset, size, stride, ...): a view.
struct TensorRef {
  StorageRef storage;
  std::int64_t offset = 0;
  std::vector<std::int64_t> sizes, strides;
};

struct Value {
  enum class Kind {
    none,
    boolean,
    integer,
    big_integer,  // over 64 bits: kept as its little-endian bytes in `text`
    floating,
    string,
    bytes,
    tuple,
    list,
    dict,
    set,
    storage,
    tensor,
    global,  // a class or function named by GLOBAL: "module.name" in `text`
    object,  // an instance of an unknown global: its name in `text`
  };
  Kind kind = Kind::none;
  bool boolean = false;
  std::int64_t integer = 0;
  double floating = 0;
  // string, bytes, big_integer, global, object
  std::string text;
  // tuple, list, set
  std::vector<Value*> items;
  // dict, in insertion order
  std::vector<std::pair<Value*, Value*>> entries;
  // object: its constructor's arguments (a tuple) and the argument of BUILD (a
  // Namespace's attributes)
  Value* arguments = nullptr;
  Value* state = nullptr;
  StorageRef storage;  // storage
  TensorRef tensor;    // tensor

  // The dict's value for a string key (the last one given), or nullptr. An
  // object's attribute when its BUILD state is such a dict.
  const Value* get(std::string_view key) const;
  // "a dict", "an int", "None", "an argparse.Namespace object", ... for messages.
  std::string kind_name() const;
};

class Pickle {
 public:
  // Runs the pickle up to STOP. Throws PickleError (truncated data, an unknown
  // or unsupported opcode, a malformed torch.save tensor or storage id).
  explicit Pickle(std::string_view bytes);
  Pickle(const Pickle&) = delete;
  Pickle& operator=(const Pickle&) = delete;
  const Value& root() const { return *root_; }

 private:
  std::deque<Value> arena_;
  Value* root_ = nullptr;
};

}  // namespace parity::pickle
