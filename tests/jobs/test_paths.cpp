#include <fcntl.h>
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

namespace flick {
namespace {

// Inputs are checked (resolve_input: symlinks followed, the target under a
// root) and then opened beneath the root by the checked canonical path with
// no symlink allowed. Each test runs both ways the open can be made: openat2
// and the O_NOFOLLOW walk used where the kernel lacks it.
class OpenBeneath : public PathsTest, public ::testing::WithParamInterface<bool> {
 protected:
  Expected<fs::Fd> open(const std::string& canonical, const std::vector<Root>& roots,
                        int flags = O_RDONLY | O_NONBLOCK) {
    return GetParam() ? open_beneath(canonical, roots, flags, "input.frames")
                      : open_beneath_by_walk(canonical, roots, flags, "input.frames");
  }
  static std::string read_all(int fd) {
    bool over = false;
    Expected<std::string> t = fs::read_limited(fd, 1 << 20, &over, "test");
    return t.ok() ? *t : "";
  }
};

// The race of issue 11, made deterministic: the check passes, then a
// directory on the path is swapped for a symlink to a directory outside the
// roots holding a file of the same name. The open fails with a clear error
// and nothing outside the root is read.
TEST_P(OpenBeneath, SymlinkSwappedInAfterTheCheckFailsTheOpen) {
  testing::write_text(dir_ / "in/shot/a.png", "inside");
  testing::write_text(dir_ / "secret/a.png", "SECRET");
  Expected<std::string> checked = resolve_input(dir_ / "in/shot/a.png", in_, "input.frames");
  ASSERT_TRUE(checked.ok()) << checked.status().message();
  std::filesystem::rename(dir_ / "in/shot", dir_ / "in/shot.old");
  ASSERT_EQ(::symlink((dir_ / "secret").c_str(), (dir_ / "in/shot").c_str()), 0);
  Expected<fs::Fd> f = open(*checked, in_);
  ASSERT_FALSE(f.ok()) << "read: " << read_all(f->get());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(f.status().message().find("input.frames: '" + *checked +
                                      "' changed since it was checked: a component of it is now "
                                      "a symlink"),
            std::string::npos)
      << f.status().message();
  // A relative symlink that stays inside the root is refused all the same:
  // what was checked is what is opened.
  std::filesystem::remove(dir_ / "in/shot");
  ASSERT_EQ(::symlink("shot.old", (dir_ / "in/shot").c_str()), 0);
  EXPECT_FALSE(open(*checked, in_).ok());
}

TEST_P(OpenBeneath, FileSwappedForASymlinkFailsTheOpen) {
  testing::write_text(dir_ / "secret/a.png", "SECRET");
  Expected<std::string> checked = resolve_input(dir_ / "in/shot/a.png", in_, "input.frames");
  ASSERT_TRUE(checked.ok());
  std::filesystem::remove(dir_ / "in/shot/a.png");
  ASSERT_EQ(::symlink((dir_ / "secret/a.png").c_str(), (dir_ / "in/shot/a.png").c_str()), 0);
  Expected<fs::Fd> f = open(*checked, in_);
  ASSERT_FALSE(f.ok()) << "read: " << read_all(f->get());
  EXPECT_NE(f.status().message().find("changed since it was checked"), std::string::npos);
}

// Symlinks are still followed where the README promises it: at the check,
// which yields the canonical path that is then opened (here through a link
// inside the root, and through one into a second input root).
TEST_P(OpenBeneath, SymlinksResolvedByTheCheckStillOpen) {
  testing::write_text(dir_ / "in/shot/a.png", "inside");
  testing::write_text(dir_ / "input-other/b.png", "other root");
  ::symlink((dir_ / "input-other/b.png").c_str(), (dir_ / "in/to-other.png").c_str());
  std::vector<Root> roots = in_;
  roots.push_back(*make_root(dir_ / "input-other", "input_roots"));
  for (const auto& [path, content] :
       {std::pair<std::string, std::string>{"in/inside.png", "inside"},
        {"in/to-other.png", "other root"}}) {
    Expected<std::string> checked = resolve_input(dir_ / path, roots, "input.image");
    ASSERT_TRUE(checked.ok()) << checked.status().message();
    Expected<fs::Fd> f = open(*checked, roots);
    ASSERT_TRUE(f.ok()) << f.status().message();
    EXPECT_EQ(read_all(f->get()), content);
  }
}

TEST_P(OpenBeneath, PathsOutsideTheRootsAreRefused) {
  Expected<fs::Fd> f = open(dir_ / "secret/key.png", in_);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("outside the roots"), std::string::npos);
}

// Directories too (the output directory's existing ancestor).
TEST_P(OpenBeneath, OpensDirectories) {
  Expected<fs::Fd> d = open(dir_ / "out", out_, O_RDONLY | O_DIRECTORY);
  ASSERT_TRUE(d.ok()) << d.status().message();
  std::filesystem::create_directories(dir_ / "out/a/b");
  EXPECT_TRUE(open(dir_ / "out/a/b", out_, O_RDONLY | O_DIRECTORY).ok());
  EXPECT_FALSE(open(dir_ / "out/evil", out_, O_RDONLY | O_DIRECTORY).ok());  // a symlink
}

INSTANTIATE_TEST_SUITE_P(Paths, OpenBeneath, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? std::string("Openat2") : std::string("Walk");
                         });

}  // namespace
}  // namespace flick
