#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "jobs/paths.h"
#include "jobs_test_util.h"

namespace flick {
namespace {

class PathsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_ / "in/shot");
    std::filesystem::create_directories(dir_ / "out");
    std::filesystem::create_directories(dir_ / "secret");
    std::filesystem::create_directories(dir_ / "input-other");
    testing::write_text(dir_ / "in/shot/a.png", "x");
    testing::write_text(dir_ / "secret/key.png", "x");
    ::symlink((dir_ / "secret/key.png").c_str(), (dir_ / "in/escape.png").c_str());
    ::symlink((dir_ / "in/shot/a.png").c_str(), (dir_ / "in/inside.png").c_str());
    ::symlink((dir_ / "secret").c_str(), (dir_ / "out/evil").c_str());
    ::symlink((dir_ / "out").c_str(), (dir_ / "out/loop").c_str());
    in_ = {*make_root(dir_ / "in", "input_roots")};
    out_ = {*make_root(dir_ / "out", "output_roots")};
  }
  testing::ScratchDir dir_;
  std::vector<Root> in_, out_;
};

TEST(Paths, NormalizeAbsolute) {
  EXPECT_EQ(*normalize_absolute("/a//b/./c/", "k"), "/a/b/c");
  EXPECT_EQ(*normalize_absolute("/", "k"), "/");
  EXPECT_FALSE(normalize_absolute("a/b", "k").ok());
  EXPECT_FALSE(normalize_absolute("", "k").ok());
  Expected<std::string> dotdot = normalize_absolute("/srv/in/../etc/passwd", "input.frames");
  ASSERT_FALSE(dotdot.ok());
  EXPECT_NE(dotdot.status().message().find("'..'"), std::string::npos);
  EXPECT_NE(dotdot.status().message().find("input.frames"), std::string::npos);
}

TEST(Paths, IsWithinRespectsComponentBoundaries) {
  EXPECT_TRUE(is_within("/srv/in", "/srv/in"));
  EXPECT_TRUE(is_within("/srv/in/a", "/srv/in"));
  EXPECT_FALSE(is_within("/srv/input", "/srv/in"));
  EXPECT_FALSE(is_within("/srv", "/srv/in"));
  EXPECT_TRUE(is_within("/anything", "/"));
}

TEST_F(PathsTest, InputInsideRootResolves) {
  Expected<std::string> p = resolve_input(dir_ / "in/shot/a.png", in_, "input.frames");
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(*p, dir_ / "in/shot/a.png");
  // A symlink that stays inside the roots is fine and resolves to its target.
  EXPECT_EQ(*resolve_input(dir_ / "in/inside.png", in_, "k"), dir_ / "in/shot/a.png");
}

TEST_F(PathsTest, InputOutsideRootsIsRefused) {
  Expected<std::string> p = resolve_input(dir_ / "secret/key.png", in_, "input.frames");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(p.status().message().find("outside the input roots"), std::string::npos);
  // A sibling sharing the root's prefix is outside too.
  testing::write_text(dir_ / "input-other/x.png", "x");
  EXPECT_FALSE(resolve_input(dir_ / "input-other/x.png", in_, "k").ok());
}

TEST_F(PathsTest, SymlinkEscapeIsRefusedNamingTheTarget) {
  Expected<std::string> p = resolve_input(dir_ / "in/escape.png", in_, "input.frames");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(p.status().message().find("resolves through a symlink"), std::string::npos);
  EXPECT_NE(p.status().message().find(dir_ / "secret/key.png"), std::string::npos);
}

TEST_F(PathsTest, MissingInputIsNotFound) {
  Expected<std::string> p = resolve_input(dir_ / "in/shot/nope.png", in_, "input.frames");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
}

TEST_F(PathsTest, OutputDirBelowRootWithDirectoriesToCreate) {
  Expected<OutputDir> o = resolve_output_dir(dir_ / "out/2024/06/shot", out_, "output.dir");
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->base, dir_ / "out");
  EXPECT_EQ(o->create, (std::vector<std::string>{"2024", "06"}));
  EXPECT_EQ(o->leaf, "shot");
  EXPECT_EQ(o->final_path(), dir_ / "out/2024/06/shot");
  EXPECT_EQ(o->partial_path(), dir_ / "out/2024/06/shot.partial");
}

TEST_F(PathsTest, OutputDirThroughAnInsideSymlinkResolves) {
  Expected<OutputDir> o = resolve_output_dir(dir_ / "out/loop/shot", out_, "output.dir");
  ASSERT_TRUE(o.ok()) << o.status().message();
  EXPECT_EQ(o->final_path(), dir_ / "out/shot");
}

TEST_F(PathsTest, OutputDirEscapesAreRefused) {
  Expected<OutputDir> escape = resolve_output_dir(dir_ / "out/evil/shot", out_, "output.dir");
  ASSERT_FALSE(escape.ok());
  EXPECT_NE(escape.status().message().find("resolves through a symlink"), std::string::npos);
  EXPECT_FALSE(resolve_output_dir(dir_ / "secret/shot", out_, "output.dir").ok());
  EXPECT_FALSE(resolve_output_dir(dir_ / "out/../secret", out_, "output.dir").ok());
  EXPECT_FALSE(resolve_output_dir("relative/shot", out_, "output.dir").ok());
  // The leaf itself must not be a symlink, and the root itself is not an output dir.
  EXPECT_FALSE(resolve_output_dir(dir_ / "out/evil", out_, "output.dir").ok());
  EXPECT_FALSE(resolve_output_dir(dir_ / "out", out_, "output.dir").ok());
}

TEST(Paths, RootMustExist) {
  EXPECT_FALSE(make_root("/nonexistent/flick-root", "input_roots").ok());
}

}  // namespace
}  // namespace flick
