#include "harness/base/pickle_reader.h"
#include "harness/base/check.h"

#include <cstring>
#include <limits>
#include <unordered_map>

namespace parity::pickle {
namespace {

using Kind = Value::Kind;

// Python's pickle opcodes (Lib/pickle.py); protocols 0 to 5.
constexpr unsigned char MARK = '(', STOP = '.', POP = '0', POP_MARK = '1', DUP = '2', FLOAT = 'F',
                        INT = 'I', BININT = 'J', BININT1 = 'K', LONG = 'L', BININT2 = 'M',
                        NONE = 'N', PERSID = 'P', BINPERSID = 'Q', REDUCE = 'R', STRING = 'S',
                        BINSTRING = 'T', SHORT_BINSTRING = 'U', UNICODE = 'V', BINUNICODE = 'X',
                        APPEND = 'a', BUILD = 'b', GLOBAL = 'c', DICT = 'd', EMPTY_DICT = '}',
                        APPENDS = 'e', GET = 'g', BINGET = 'h', INST = 'i', LONG_BINGET = 'j',
                        LIST = 'l', EMPTY_LIST = ']', OBJ = 'o', PUT = 'p', BINPUT = 'q',
                        LONG_BINPUT = 'r', SETITEM = 's', TUPLE = 't', EMPTY_TUPLE = ')',
                        SETITEMS = 'u', BINFLOAT = 'G', PROTO = 0x80, NEWOBJ = 0x81, EXT1 = 0x82,
                        EXT2 = 0x83, EXT4 = 0x84, TUPLE1 = 0x85, TUPLE2 = 0x86, TUPLE3 = 0x87,
                        NEWTRUE = 0x88, NEWFALSE = 0x89, LONG1 = 0x8a, LONG4 = 0x8b, BINBYTES = 'B',
                        SHORT_BINBYTES = 'C', SHORT_BINUNICODE = 0x8c, BINUNICODE8 = 0x8d,
                        BINBYTES8 = 0x8e, EMPTY_SET = 0x8f, ADDITEMS = 0x90, FROZENSET = 0x91,
                        NEWOBJ_EX = 0x92, STACK_GLOBAL = 0x93, MEMOIZE = 0x94, FRAME = 0x95,
                        BYTEARRAY8 = 0x96, NEXT_BUFFER = 0x97, READONLY_BUFFER = 0x98;

std::string byte_text(unsigned char c) {
  static const char* hex = "0123456789abcdef";
  std::string s = "0x";
  s += hex[c >> 4];
  s += hex[c & 15];
  if (c >= 0x20 && c < 0x7f) s += std::string(" '") + static_cast<char>(c) + "'";
  return s;
}

class Machine {
 public:
  Machine(std::string_view in, std::deque<Value>& arena) : in_(in), arena_(arena) {}

  Value* run() {
    while (true) {
      op_at_ = pos_;
      const auto op = static_cast<unsigned char>(read(1)[0]);
      if (op == STOP) return pop();
      step(op);
    }
  }

 private:
  std::string_view in_;
  std::deque<Value>& arena_;
  std::size_t pos_ = 0, op_at_ = 0;
  std::vector<Value*> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, Value*> memo_;

  [[noreturn]] void fail(const std::string& what) const {
    throw PickleError(what + " (opcode at byte " + std::to_string(op_at_) + ")");
  }

  std::string_view read(std::uint64_t n) {
    if (n > in_.size() - pos_)
      throw PickleError("truncated: " + std::to_string(n) + " byte(s) needed at byte " +
                        std::to_string(pos_) + ", " + std::to_string(in_.size() - pos_) + " left");
    const std::string_view s = in_.substr(pos_, static_cast<std::size_t>(n));
    pos_ += static_cast<std::size_t>(n);
    return s;
  }
  std::uint64_t read_uint(int n) {
    const std::string_view b = read(static_cast<std::uint64_t>(n));
    std::uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[i]);
    return v;
  }
  std::string_view read_line() {
    const std::size_t end = in_.find('\n', pos_);
    if (end == std::string_view::npos)
      throw PickleError("truncated: no end of line after byte " + std::to_string(pos_));
    const std::string_view s = in_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }

  Value* make(Kind kind) {
    arena_.emplace_back();
    arena_.back().kind = kind;
    return &arena_.back();
  }
  Value* make_int(std::int64_t v) {
    Value* x = make(Kind::integer);
    x->integer = v;
    return x;
  }
  Value* make_text(Kind kind, std::string_view s) {
    Value* x = make(kind);
    x->text = std::string(s);
    return x;
  }

  void push(Value* v) { stack_.push_back(v); }
  Value* pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back()))
      fail("the stack is empty");
    Value* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Value* top() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back()))
      fail("the stack is empty");
    return stack_.back();
  }
  std::vector<Value*> pop_mark() {
    if (marks_.empty()) fail("no MARK to pop to");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Value*> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  Value* tuple_of(std::vector<Value*> items) {
    Value* t = make(Kind::tuple);
    t->items = std::move(items);
    return t;
  }
  void memo_put(std::uint64_t key) { memo_[key] = top(); }
  void memo_get(std::uint64_t key) {
    const auto it = memo_.find(key);
    if (it == memo_.end()) fail("memo key " + std::to_string(key) + " is not defined");
    push(it->second);
  }
  std::uint64_t text_uint(std::string_view s) {
    std::uint64_t v = 0;
    if (s.empty() || s.size() > 18) fail("bad memo key '" + std::string(s) + "'");
    for (const char c : s) {
      if (c < '0' || c > '9') fail("bad memo key '" + std::string(s) + "'");
      v = v * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return v;
  }
  Value* text_int(std::string_view s) {
    if (!s.empty() && s.back() == 'L') s.remove_suffix(1);  // LONG's suffix
    if (s == "01" || s == "00") {
      Value* b = make(Kind::boolean);
      b->boolean = s == "01";
      return b;
    }
    try {
      std::size_t used = 0;
      const long long v = std::stoll(std::string(s), &used);
      PARITY_CHECK(used == s.size(), "");
      return make_int(v);
    } catch (const std::exception&) {
      fail("bad integer '" + std::string(s.substr(0, 40)) + "'");
    }
  }
  // LONG1 / LONG4: little-endian two's complement.
  Value* long_int(std::string_view b) {
    if (b.size() > 8) return make_text(Kind::big_integer, b);
    std::uint64_t v = 0;
    for (std::size_t i = b.size(); i-- > 0;) v = (v << 8) | static_cast<unsigned char>(b[i]);
    if (!b.empty() && b.size() < 8 && (static_cast<unsigned char>(b.back()) & 0x80))
      v |= ~std::uint64_t{0} << (8 * b.size());
    return make_int(static_cast<std::int64_t>(v));
  }

  std::string need_string(const Value* v, const char* what) {
    if (v->kind != Kind::string) fail(std::string(what) + " is " + v->kind_name() + ", not a str");
    return v->text;
  }
  std::vector<std::int64_t> int_tuple(const Value* v, const char* what) {
    if (v->kind != Kind::tuple && v->kind != Kind::list)
      fail(std::string(what) + " is " + v->kind_name() + ", not a tuple of ints");
    std::vector<std::int64_t> out;
    for (const Value* x : v->items) {
      if (x->kind != Kind::integer) fail(std::string(what) + " holds " + x->kind_name());
      out.push_back(x->integer);
    }
    return out;
  }

  // ('storage', torch.<Type>Storage, key, location, numel)
  Value* persistent_load(const Value* pid) {
    if (pid->kind != Kind::tuple || pid->items.size() != 5 || pid->items[0]->kind != Kind::string ||
        pid->items[0]->text != "storage")
      fail("a persistent id that is not torch.save's ('storage', type, key, location, numel)");
    const Value* type = pid->items[1];
    if (type->kind != Kind::global || type->text.rfind("torch.", 0) != 0)
      fail("a storage type that is " + type->kind_name());
    Value* s = make(Kind::storage);
    s->storage.type = type->text.substr(6);
    s->storage.key = need_string(pid->items[2], "a storage key");
    if (pid->items[4]->kind != Kind::integer || pid->items[4]->integer < 0)
      fail("a storage size that is " + pid->items[4]->kind_name());
    s->storage.numel = pid->items[4]->integer;
    return s;
  }

  // A known global called with `args`; any other global makes an opaque object.
  Value* call(const Value* callable, Value* args, bool nested = false) {
    if (callable->kind != Kind::global) fail("REDUCE calls " + callable->kind_name());
    if (args->kind != Kind::tuple) fail("REDUCE's arguments are " + args->kind_name());
    const std::string& f = callable->text;
    const std::vector<Value*>& a = args->items;
    if (f == "collections.OrderedDict" || f == "builtins.dict" || f == "__builtin__.dict") {
      // The entries follow as SETITEMS (pickle's own reduction of a dict).
      return make(Kind::dict);
    }
    if (f == "torch._utils._rebuild_tensor_v2" || f == "torch._utils._rebuild_tensor") {
      if (a.size() < 4) fail(f + " with " + std::to_string(a.size()) + " argument(s), not 4+");
      if (a[0]->kind != Kind::storage) fail(f + "'s storage is " + a[0]->kind_name());
      if (a[1]->kind != Kind::integer) fail(f + "'s offset is " + a[1]->kind_name());
      Value* t = make(Kind::tensor);
      t->tensor.storage = a[0]->storage;
      t->tensor.offset = a[1]->integer;
      t->tensor.sizes = int_tuple(a[2], "a tensor's size");
      t->tensor.strides = int_tuple(a[3], "a tensor's stride");
      if (t->tensor.sizes.size() != t->tensor.strides.size())
        fail("a tensor with " + std::to_string(t->tensor.sizes.size()) + " sizes and " +
             std::to_string(t->tensor.strides.size()) + " strides");
      return t;
    }
    if (f == "torch._utils._rebuild_parameter" ||
        f == "torch._utils._rebuild_parameter_with_state") {
      if (a.empty() || a[0]->kind != Kind::tensor) fail(f + " of a value that is not a tensor");
      return a[0];
    }
    if (f == "torch._tensor._rebuild_from_type_v2" && !nested) {
      // (func, new_type, args, state): a Tensor subclass; the data is func(*args).
      if (a.size() < 3 || a[2]->kind != Kind::tuple) fail(f + " with malformed arguments");
      return call(a[0], a[2], true);
    }
    if (f == "builtins.set" || f == "builtins.frozenset" || f == "__builtin__.set" ||
        f == "__builtin__.frozenset") {
      return make(Kind::set);  // its members are never read
    }
    Value* o = make_text(Kind::object, f);
    o->arguments = args;
    return o;
  }

  void set_items(Value* target, const std::vector<Value*>& kv) {
    if (kv.size() % 2 != 0) fail("SETITEMS with an odd number of values");
    if (target->kind == Kind::object) return;  // a dict subclass nobody reads
    if (target->kind != Kind::dict) fail("SETITEM on " + target->kind_name());
    for (std::size_t i = 0; i < kv.size(); i += 2) target->entries.emplace_back(kv[i], kv[i + 1]);
  }
  void append_items(Value* target, const std::vector<Value*>& items) {
    if (target->kind == Kind::object) return;  // a list subclass nobody reads
    if (target->kind != Kind::list && target->kind != Kind::set)
      fail("APPEND to " + target->kind_name());
    target->items.insert(target->items.end(), items.begin(), items.end());
  }

  void step(unsigned char op) {
    switch (op) {
      case PROTO:
        read(1);
        return;
      case FRAME:
        read(8);
        return;
      case MARK:
        marks_.push_back(stack_.size());
        return;
      case POP:
        if (!marks_.empty() && stack_.size() == marks_.back())
          marks_.pop_back();
        else
          pop();
        return;
      case POP_MARK:
        pop_mark();
        return;
      case DUP:
        push(top());
        return;
      case NONE:
        push(make(Kind::none));
        return;
      case NEWTRUE:
      case NEWFALSE: {
        Value* b = make(Kind::boolean);
        b->boolean = op == NEWTRUE;
        push(b);
        return;
      }
      case INT:
      case LONG:
        push(text_int(read_line()));
        return;
      case BININT:
        push(make_int(static_cast<std::int32_t>(read_uint(4))));
        return;
      case BININT1:
        push(make_int(static_cast<std::int64_t>(read_uint(1))));
        return;
      case BININT2:
        push(make_int(static_cast<std::int64_t>(read_uint(2))));
        return;
      case LONG1:
        push(long_int(read(read_uint(1))));
        return;
      case LONG4:
        push(long_int(read(read_uint(4))));
        return;
      case FLOAT: {
        const std::string s(read_line());
        Value* x = make(Kind::floating);
        char* end = nullptr;
        x->floating = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size()) fail("bad float '" + s.substr(0, 40) + "'");
        push(x);
        return;
      }
      case BINFLOAT: {
        std::uint64_t bits = 0;
        for (const char c : read(8)) bits = (bits << 8) | static_cast<unsigned char>(c);
        Value* x = make(Kind::floating);
        std::memcpy(&x->floating, &bits, sizeof bits);
        push(x);
        return;
      }
      case SHORT_BINUNICODE:
        push(make_text(Kind::string, read(read_uint(1))));
        return;
      case BINUNICODE:
        push(make_text(Kind::string, read(read_uint(4))));
        return;
      case BINUNICODE8:
        push(make_text(Kind::string, read(read_uint(8))));
        return;
      case SHORT_BINSTRING:
        push(make_text(Kind::string, read(read_uint(1))));
        return;
      case BINSTRING:
        push(make_text(Kind::string, read(read_uint(4))));
        return;
      case SHORT_BINBYTES:
        push(make_text(Kind::bytes, read(read_uint(1))));
        return;
      case BINBYTES:
        push(make_text(Kind::bytes, read(read_uint(4))));
        return;
      case BINBYTES8:
      case BYTEARRAY8:
        push(make_text(Kind::bytes, read(read_uint(8))));
        return;
      case EMPTY_TUPLE:
        push(make(Kind::tuple));
        return;
      case TUPLE:
        push(tuple_of(pop_mark()));
        return;
      case TUPLE1:
      case TUPLE2:
      case TUPLE3: {
        std::vector<Value*> items(static_cast<std::size_t>(op - TUPLE1 + 1));
        for (std::size_t i = items.size(); i-- > 0;) items[i] = pop();
        push(tuple_of(std::move(items)));
        return;
      }
      case EMPTY_LIST:
        push(make(Kind::list));
        return;
      case LIST: {
        Value* l = make(Kind::list);
        l->items = pop_mark();
        push(l);
        return;
      }
      case APPEND: {
        Value* v = pop();
        append_items(top(), {v});
        return;
      }
      case APPENDS: {
        const std::vector<Value*> items = pop_mark();
        append_items(top(), items);
        return;
      }
      case EMPTY_SET:
        push(make(Kind::set));
        return;
      case ADDITEMS: {
        const std::vector<Value*> items = pop_mark();
        append_items(top(), items);
        return;
      }
      case FROZENSET: {
        Value* s = make(Kind::set);
        s->items = pop_mark();
        push(s);
        return;
      }
      case EMPTY_DICT:
        push(make(Kind::dict));
        return;
      case DICT: {
        Value* d = make(Kind::dict);
        set_items(d, pop_mark());
        push(d);
        return;
      }
      case SETITEM: {
        Value* v = pop();
        Value* k = pop();
        set_items(top(), {k, v});
        return;
      }
      case SETITEMS: {
        const std::vector<Value*> kv = pop_mark();
        set_items(top(), kv);
        return;
      }
      case PUT:
        memo_put(text_uint(read_line()));
        return;
      case BINPUT:
        memo_put(read_uint(1));
        return;
      case LONG_BINPUT:
        memo_put(read_uint(4));
        return;
      case MEMOIZE:
        memo_put(memo_.size());
        return;
      case GET:
        memo_get(text_uint(read_line()));
        return;
      case BINGET:
        memo_get(read_uint(1));
        return;
      case LONG_BINGET:
        memo_get(read_uint(4));
        return;
      case GLOBAL: {
        const std::string module(read_line());
        const std::string name(read_line());
        push(make_text(Kind::global, module + "." + name));
        return;
      }
      case STACK_GLOBAL: {
        const std::string name = need_string(pop(), "STACK_GLOBAL's name");
        const std::string module = need_string(pop(), "STACK_GLOBAL's module");
        push(make_text(Kind::global, module + "." + name));
        return;
      }
      case REDUCE: {
        Value* args = pop();
        Value* callable = pop();
        push(call(callable, args));
        return;
      }
      case NEWOBJ:
      case NEWOBJ_EX: {
        if (op == NEWOBJ_EX) pop();  // kwargs
        Value* args = pop();
        Value* cls = pop();
        if (cls->kind != Kind::global) fail("NEWOBJ of " + cls->kind_name());
        Value* o = make_text(Kind::object, cls->text);
        o->arguments = args;
        push(o);
        return;
      }
      case OBJ: {
        std::vector<Value*> items = pop_mark();
        if (items.empty() || items[0]->kind != Kind::global) fail("OBJ without a class");
        Value* o = make_text(Kind::object, items[0]->text);
        o->arguments = tuple_of({items.begin() + 1, items.end()});
        push(o);
        return;
      }
      case INST: {
        const std::string module(read_line());
        const std::string name(read_line());
        Value* o = make_text(Kind::object, module + "." + name);
        o->arguments = tuple_of(pop_mark());
        push(o);
        return;
      }
      case BUILD: {
        Value* state = pop();
        Value* target = top();
        // An object keeps its state; a dict's attributes (OrderedDict._metadata)
        // and a tensor's Python state mean nothing here.
        if (target->kind == Kind::object) target->state = state;
        return;
      }
      case BINPERSID:
        push(persistent_load(pop()));
        return;
      default:
        break;
    }
    const char* name = op == PERSID            ? "PERSID"
                       : op == STRING          ? "STRING"
                       : op == UNICODE         ? "UNICODE"
                       : op == EXT1            ? "EXT1"
                       : op == EXT2            ? "EXT2"
                       : op == EXT4            ? "EXT4"
                       : op == NEXT_BUFFER     ? "NEXT_BUFFER"
                       : op == READONLY_BUFFER ? "READONLY_BUFFER"
                                               : nullptr;
    if (name != nullptr) fail(std::string("unsupported opcode ") + name);
    fail("unknown opcode " + byte_text(op));
  }
};

}  // namespace

const Value* Value::get(std::string_view key) const {
  const Value* dict = kind == Kind::object ? state : this;
  if (dict == nullptr || dict->kind != Kind::dict) return nullptr;
  const Value* found = nullptr;
  for (const auto& [k, v] : dict->entries)
    if (k->kind == Kind::string && k->text == key) found = v;
  return found;
}

std::string Value::kind_name() const {
  switch (kind) {
    case Kind::none:
      return "None";
    case Kind::boolean:
      return "a bool";
    case Kind::integer:
    case Kind::big_integer:
      return "an int";
    case Kind::floating:
      return "a float";
    case Kind::string:
      return "a str";
    case Kind::bytes:
      return "bytes";
    case Kind::tuple:
      return "a tuple";
    case Kind::list:
      return "a list";
    case Kind::dict:
      return "a dict";
    case Kind::set:
      return "a set";
    case Kind::storage:
      return "a storage";
    case Kind::tensor:
      return "a tensor";
    case Kind::global:
      return "the global " + text;
    case Kind::object:
      return (text.find_first_of("aeiouAEIOU") == 0 ? "an " : "a ") + text + " object";
  }
  return "a value";
}

Pickle::Pickle(std::string_view bytes) {
  Machine machine(bytes, arena_);
  root_ = machine.run();
}

}  // namespace parity::pickle
