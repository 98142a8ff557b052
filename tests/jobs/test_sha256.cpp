#include <fcntl.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "jobs/fs.h"
#include "jobs/sha256.h"
#include "jobs_test_util.h"

namespace flick {
namespace {

// FIPS 180-4 / NIST CAVP example vectors.
TEST(Sha256, NistVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(
      sha256_hex(
          "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklm"
          "nopqrlmnopqrsmnopqrstnopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Every split of the input into two updates hashes the same as one update
// (exercises the block buffering at every offset around the 64-byte blocks
// and the 55/56-byte padding boundary).
TEST(Sha256, SplitUpdatesMatchOneShot) {
  std::mt19937 rng(7);
  std::string data(200, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t len : {0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 200}) {
    const std::string msg = data.substr(0, len);
    const std::string expected = sha256_hex(msg);
    for (size_t cut = 0; cut <= len; ++cut) {
      Sha256 h;
      h.update(msg.substr(0, cut));
      h.update(msg.substr(cut));
      EXPECT_EQ(h.hex_digest(), expected) << "len " << len << " cut " << cut;
    }
  }
}

// The same bytes through sha256_fd and coreutils' sha256sum (an independent
// implementation).
TEST(Sha256, FileMatchesCoreutils) {
  testing::ScratchDir dir;
  std::mt19937 rng(11);
  std::string data(3 * (1 << 20) + 12345, '\0');  // spans several read() chunks
  for (char& c : data) c = static_cast<char>(rng());
  const std::string path = dir / "blob";
  testing::write_text(path, data);
  fs::Fd fd(::open(path.c_str(), O_RDONLY));
  Expected<std::string> ours = sha256_fd(fd.get(), path);
  ASSERT_TRUE(ours.ok()) << ours.status().message();
  FILE* p = ::popen(("sha256sum '" + path + "'").c_str(), "r");
  ASSERT_NE(p, nullptr);
  char line[128] = {};
  ASSERT_NE(std::fgets(line, sizeof line, p), nullptr);
  ::pclose(p);
  EXPECT_EQ(*ours, std::string(line, 64));
  EXPECT_EQ(*ours, sha256_hex(data));
}

}  // namespace
}  // namespace flick
