// The restricted unpickler on hand-built pickles: what torch.save writes is
// accepted, everything else is refused with a message, never a crash.
#include <gtest/gtest.h>

#include <random>

#include "runtime/weights/pickle.h"

namespace flick {
namespace {

// Builds pickle bytes opcode by opcode.
class Pkl {
 public:
  Pkl& op(int o) {
    b_.push_back(static_cast<uint8_t>(o));
    return *this;
  }
  Pkl& raw(const std::string& s) {
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  Pkl& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) op(static_cast<int>((v >> (8 * i)) & 0xFF));
    return *this;
  }
  Pkl& proto(int v = 2) { return op(0x80).op(v); }
  Pkl& str(const std::string& s) { return op('X').u32(static_cast<uint32_t>(s.size())).raw(s); }
  Pkl& global(const std::string& m, const std::string& n) {
    return op('c').raw(m + "\n" + n + "\n");
  }
  Pkl& k(int v) { return op('K').op(v); }                              // BININT1
  Pkl& j(int32_t v) { return op('J').u32(static_cast<uint32_t>(v)); }  // BININT
  Pkl& mark() { return op('('); }
  Pkl& tuple() { return op('t'); }
  Pkl& stop() { return op('.'); }
  Pkl& empty_dict() { return op('}'); }
  Pkl& ordered_dict() { return global("collections", "OrderedDict").op(')').op('R'); }
  // ('storage', torch.<type>, key, 'cpu', numel) BINPERSID
  Pkl& storage(const std::string& type, const std::string& key, int numel) {
    return mark().str("storage").global("torch", type).str(key).str("cpu").j(numel).tuple().op('Q');
  }
  // _rebuild_tensor_v2(storage, offset, size, stride, False, OrderedDict())
  Pkl& tensor(const std::vector<int>& size, const std::vector<int>& stride, int offset = 0,
              int numel = 6, const std::string& type = "FloatStorage",
              const std::string& key = "0") {
    global("torch._utils", "_rebuild_tensor_v2").mark().storage(type, key, numel).j(offset);
    mark();
    for (int s : size) j(s);
    tuple().mark();
    for (int s : stride) j(s);
    tuple().op(0x89).ordered_dict().tuple().op('R');
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return b_; }

 private:
  std::vector<uint8_t> b_;
};

Expected<PickledStateDict> run(const Pkl& p) {
  return unpickle_state_dict(p.bytes().data(), p.bytes().size());
}

void expect_error(const Pkl& p, const std::string& fragment) {
  auto r = run(p);
  ASSERT_FALSE(r.ok()) << "expected an error containing: " << fragment;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(r.status().message().find(fragment), std::string::npos) << r.status().message();
}

TEST(Unpickler, ReadsAStateDictAsTorchWritesIt) {
  Pkl p;
  p.proto().empty_dict().mark().str("w").tensor({2, 3}, {3, 1}).str("t").tensor({3, 2}, {1, 3});
  p.op('u').stop();
  auto r = run(p);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->tensors.size(), 2u);
  const PickledTensor& t = r->tensors[0];  // sorted: "t" < "w"
  EXPECT_EQ(t.name, "t");
  EXPECT_EQ(t.type->name, "F32");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(t.strides, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(t.storage_key, "0");
  EXPECT_EQ(t.storage_bytes, 24u);
  EXPECT_EQ(r->tensors[1].name, "w");
}

TEST(Unpickler, TensorViewsMustLieInsideTheirStorage) {
  expect_error(Pkl().proto().empty_dict().str("w").tensor({2, 3}, {3, 1}, 0, 5).op('s').stop(),
               "runs past the end of storage '0' (20 bytes)");
  expect_error(Pkl().proto().empty_dict().str("w").tensor({2, 3}, {3, 1}, 1, 6).op('s').stop(),
               "runs past the end of storage");
  expect_error(Pkl().proto().empty_dict().str("w").tensor({2, 3}, {1, -1}).op('s').stop(),
               "negative stride");
  expect_error(Pkl().proto().empty_dict().str("w").tensor({2, 3}, {1}).op('s').stop(),
               "tensor size 2-d but stride 1-d");
  expect_error(Pkl().proto().empty_dict().str("w").tensor({2, 3}, {3, 1}, -1).op('s').stop(),
               "negative storage offset");
  expect_error(Pkl().proto().empty_dict().str("w").tensor({-2, 3}, {3, 1}).op('s').stop(),
               "negative or overflowing dimension");
  expect_error(
      Pkl().proto().empty_dict().str("w").tensor({65536, 65536}, {65536, 1}).op('s').stop(),
      "runs past the end of storage");
  // Huge strides overflow the extent computation instead of wrapping around.
  expect_error(
      Pkl().proto().empty_dict().str("w").tensor({2, 2}, {0x7FFFFFFF, 0x7FFFFFFF}).op('s').stop(),
      "runs past the end of storage");
  // A 0-element view may sit at the very end.
  auto r = run(Pkl().proto().empty_dict().str("w").tensor({0, 3}, {3, 1}, 6).op('s').stop());
  EXPECT_TRUE(r.ok()) << r.status().message();
}

TEST(Unpickler, RefusesArbitraryGlobalsByName) {
  expect_error(Pkl().proto().global("os", "system").stop(), "refusing global os.system");
  expect_error(Pkl().proto().global("posix", "system").str("echo hi").op(0x85).op('R').stop(),
               "refusing global posix.system");
  // Protocol 4 names globals from the stack.
  expect_error(
      Pkl().proto(4).op(0x8c).op(8).raw("builtins").op(0x8c).op(4).raw("eval").op(0x93).stop(),
      "refusing global builtins.eval");
  expect_error(Pkl().proto().global("torch", "load").stop(), "refusing global torch.load");
  expect_error(Pkl().proto().global("torch", "QInt8Storage").stop(),
               "unsupported storage type torch.QInt8Storage");
  expect_error(Pkl().proto().global("torch._utils", "_rebuild_qtensor").stop(),
               "refusing global torch._utils._rebuild_qtensor");
}

TEST(Unpickler, RefusesCallsAndObjectsOutsideTheWhitelist) {
  expect_error(Pkl().proto().global("collections", "OrderedDict").op(')').op(0x81).stop(),
               "refusing to instantiate collections.OrderedDict");
  expect_error(Pkl().proto().global("torch", "FloatStorage").op(')').op('R').stop(),
               "cannot call torch.FloatStorage");
  expect_error(Pkl().proto().global("collections", "OrderedDict").k(1).op(0x85).op('R').stop(),
               "OrderedDict called with arguments");
  expect_error(Pkl().proto().str("x").op(')').op('R').stop(), "cannot call a str");
  // BUILD may only set a state dict's _metadata, nothing else.
  expect_error(Pkl().proto().op(']').empty_dict().op('b').stop(),
               "refusing to set the state of a list");
  auto ok = run(Pkl().proto().empty_dict().empty_dict().op('b').stop());
  EXPECT_TRUE(ok.ok()) << ok.status().message();
  expect_error(Pkl().proto().op(0x82).k(1).stop(), "extension-registry");
}

TEST(Unpickler, RefusesMalformedPersistentIds) {
  expect_error(Pkl().proto().mark().str("module").k(1).tuple().op('Q').stop(),
               "persistent id must be ('storage', type, key, location, numel)");
  expect_error(Pkl()
                   .proto()
                   .mark()
                   .str("storage")
                   .str("FloatStorage")
                   .str("0")
                   .str("cpu")
                   .k(1)
                   .tuple()
                   .op('Q')
                   .stop(),
               "where a storage type belongs");
  expect_error(Pkl().proto().storage("FloatStorage", "../x", 1).stop(), "plain name");
  expect_error(Pkl().proto().storage("FloatStorage", "0", -1).stop(), "negative size");
  expect_error(Pkl().proto().storage("FloatStorage", "0", 2).storage("HalfStorage", "0", 2).stop(),
               "declared twice with different types or sizes");
}

TEST(Unpickler, RefusesBrokenStreamsWithTheirOffset) {
  expect_error(Pkl(), "pickle byte 0: ends without STOP");
  expect_error(Pkl().proto().stop(), "pickle byte 2: STOP with an empty stack");
  expect_error(Pkl().proto(1), "pickle protocol 1 (need 2-5)");
  expect_error(Pkl().proto().op(0xFF), "unsupported opcode 0xff");
  expect_error(Pkl().proto().op('I').raw("01\n"), "unsupported opcode 0x49");
  expect_error(Pkl().proto().op('0'), "pops from an empty stack");
  expect_error(Pkl().proto().op('t'), "no MARK to pop to");
  expect_error(Pkl().proto().op('h').op(3), "memo entry 3 was never stored");
  expect_error(Pkl().proto().op('X').u32(1000).raw("ab"), "truncated: needs 1000 more bytes");
  expect_error(Pkl().proto().op(0x8d).u32(0xFFFFFFFF).u32(0xFFFFFFFF), "truncated");
  expect_error(Pkl().proto().op(0x8b).u32(0xFFFFFFF0), "truncated");
  expect_error(Pkl().proto().op('c').raw("os"), "unterminated line");
  // LONG1 of 9 bytes that is not a sign extension of 64 bits.
  expect_error(Pkl().proto().op(0x8a).op(9).raw(std::string(8, '\0')).op(1).stop(),
               "integer wider than 64 bits");
  expect_error(Pkl().proto().mark().op(0x87).stop(), "TUPLE3 on a short stack");
  expect_error(Pkl().proto().k(1).op('a').stop(), "APPEND without a list");
  expect_error(Pkl().proto().k(1).k(2).k(3).op('s').stop(), "sets items on a int");
}

TEST(Unpickler, ReadsWideIntegers) {
  // LONG1 with sign extension past 8 bytes is still an int64.
  Pkl p;
  p.proto().empty_dict().str("a").op(0x8a).op(9).raw(std::string(9, '\xff')).op('s');
  p.str("b").op(0x8a).op(2).op(0x00).op(0x80).op('s');  // -32768
  p.str("c").op(0x8a).op(0).op('s').stop();             // 0
  auto r = run(p);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->scalars.at("a"), "-1");
  EXPECT_EQ(r->scalars.at("b"), "-32768");
  EXPECT_EQ(r->scalars.at("c"), "0");
}

TEST(Unpickler, RefusesStructuresThatAreNotStateDicts) {
  expect_error(Pkl().proto().op(']').stop(), "the pickle holds a list, not a state dict");
  expect_error(Pkl().proto().k(3).stop(), "the pickle holds a plain value, not a state dict");
  expect_error(Pkl().proto().tensor({2, 3}, {3, 1}).stop(), "the pickle holds a tensor");
  expect_error(Pkl().proto().empty_dict().mark().k(1).k(2).tuple().k(3).op('s').stop(),
               "dict key is a tuple, not a str");
  expect_error(Pkl().proto().empty_dict().str("f").global("torch", "float32").op('s').stop(),
               "'f': a torch.float32 is not a tensor or a plain value");
  // Two paths to one name.
  Pkl dup;
  dup.proto().empty_dict().str("a.b").tensor({2}, {1}).op('s');
  dup.str("a").empty_dict().str("b").tensor({2}, {1}).op('s').op('s').stop();
  expect_error(dup, "two tensors flatten to the name 'a.b'");
}

TEST(Unpickler, CyclesAndSharedContainersAreBounded) {
  // A dict that contains itself.
  expect_error(Pkl().proto().empty_dict().op('q').op(0).str("self").op('h').op(0).op('s').stop(),
               "nested more than 64 deep");
  // d_i = {"a": d_(i-1), "b": d_(i-1)}: 2^40 paths from 40 dicts.
  Pkl p;
  p.proto().empty_dict().str("x").k(1).op('s').op('r').u32(0);
  for (uint32_t i = 1; i <= 40; ++i) {
    p.empty_dict().str("a").op('j').u32(i - 1).op('s').str("b").op('j').u32(i - 1).op('s');
    p.op('r').u32(i);
  }
  p.stop();
  expect_error(p, "more than 1M entries");
}

TEST(Unpickler, RandomMutationsNeverCrash) {
  Pkl base;
  base.proto().ordered_dict().op('q').op(0).mark();
  base.str("w").tensor({2, 3}, {3, 1}).str("t").tensor({3, 2}, {1, 3});
  base.str("h").tensor({4}, {1}, 0, 4, "HalfStorage", "1");
  base.op('u').empty_dict().str("_metadata").ordered_dict().op('s').op('b').stop();
  ASSERT_TRUE(run(base).ok());
  std::mt19937 rng(7);
  int accepted = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<uint8_t> m = base.bytes();
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % m.size();
      switch (rng() % 4) {
        case 0: m[pos] = static_cast<uint8_t>(rng()); break;
        case 1: m[pos] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        case 2: m.erase(m.begin() + static_cast<ptrdiff_t>(pos)); break;
        default: m.resize(pos); break;
      }
      if (m.empty()) break;
    }
    auto r = unpickle_state_dict(m.data(), m.size());
    if (!r.ok()) continue;
    ++accepted;
    for (const PickledTensor& t : r->tensors) {
      EXPECT_EQ(t.shape.size(), t.strides.size());
      EXPECT_GE(t.offset, 0);
    }
  }
  EXPECT_GT(accepted, 0);
}

}  // namespace
}  // namespace flick
