#include <gtest/gtest.h>

#include <cmath>

#include "jobs/toml_reader.h"

namespace flick {
namespace {

struct Parsed {
  Diagnostics diag{"t.toml"};
  std::optional<toml::value> doc;
  explicit Parsed(const std::string& text) { doc = parse_toml(text, diag); }
};

TEST(TomlReader, ReadsTypedValues) {
  Parsed p("s = \"x\"\ni = 7\nf = 2.5\nn = 3\nb = true\na = [\"p\", \"q\"]\n[t]\nk = 1\n");
  ASSERT_TRUE(p.doc);
  TableReader r(p.diag, *p.doc, "");
  EXPECT_EQ(r.string("s", Need::kRequired, "a string"), "x");
  EXPECT_EQ(r.integer("i", Need::kRequired, 0, 10), 7);
  EXPECT_EQ(r.number("f", Need::kRequired, 0, 10), 2.5);
  EXPECT_EQ(r.number("n", Need::kRequired, 0, 10), 3.0);  // an integer is a number
  EXPECT_EQ(r.boolean("b", Need::kRequired), true);
  EXPECT_EQ(r.strings("a", Need::kRequired, "names"), (std::vector<std::string>{"p", "q"}));
  std::optional<TableReader> t = r.table("t", Need::kRequired);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->integer("k", Need::kRequired, 0, 1), 1);
  EXPECT_EQ(r.string("absent", Need::kOptional, "x"), std::nullopt);
  t->check_unknown_keys();
  r.check_unknown_keys();
  EXPECT_TRUE(p.diag.ok()) << p.diag.status().message();
}

// find_or would turn "25" into the default; here it is an error at the value.
TEST(TomlReader, WrongTypeIsAnErrorAtTheValue) {
  Parsed p("[input]\nfps = \"25\"\n");
  TableReader root(p.diag, *p.doc, "");
  std::optional<TableReader> input = root.table("input", Need::kRequired);
  EXPECT_EQ(input->number("fps", Need::kOptional, 0, 100), std::nullopt);
  ASSERT_EQ(p.diag.all().size(), 1u);
  const Diagnostic& d = p.diag.first();
  EXPECT_EQ(d.file, "t.toml");
  EXPECT_EQ(d.line, 2);
  EXPECT_EQ(d.column, 7);
  EXPECT_EQ(d.key, "input.fps");
  EXPECT_NE(d.message.find("expected a number in [0, 100], got a string"), std::string::npos)
      << d.message;
  EXPECT_NE(d.message.find("t.toml"), std::string::npos);
  EXPECT_NE(d.message.find("fps = \"25\""), std::string::npos);  // the source line
  EXPECT_EQ(p.diag.status().code(), StatusCode::kInvalidInput);
}

TEST(TomlReader, IntegerRangeIsChecked) {
  // toml11 saturates literals beyond int64; the range check catches them too.
  Parsed p("a = 52\nb = -1\nc = 99999999999999999999\nd = 1.0\n");
  TableReader r(p.diag, *p.doc, "");
  EXPECT_EQ(r.integer("a", Need::kRequired, 0, 51), std::nullopt);
  EXPECT_EQ(r.integer("b", Need::kRequired, 0, 51), std::nullopt);
  EXPECT_EQ(r.integer("c", Need::kRequired, 0, 51), std::nullopt);
  EXPECT_EQ(r.integer("d", Need::kRequired, 0, 51), std::nullopt);  // a float is not an integer
  ASSERT_EQ(p.diag.all().size(), 4u);
  EXPECT_NE(p.diag.all()[0].message.find("expected an integer in 0..51, got 52"),
            std::string::npos);
  EXPECT_NE(p.diag.all()[3].message.find("got a float"), std::string::npos);
}

TEST(TomlReader, NonFiniteAndOpenBoundsAreRejected) {
  Parsed p("a = nan\nb = inf\nc = 0\nd = 0.0001\n");
  TableReader r(p.diag, *p.doc, "");
  EXPECT_EQ(r.number("a", Need::kRequired, 0, 10), std::nullopt);
  EXPECT_EQ(r.number("b", Need::kRequired, 0, HUGE_VAL), std::nullopt);
  EXPECT_EQ(r.number("c", Need::kRequired, 0, 10, /*lo_open=*/true), std::nullopt);
  EXPECT_EQ(r.number("d", Need::kRequired, 0, 10, /*lo_open=*/true), 0.0001);
  EXPECT_EQ(p.diag.all().size(), 3u);
}

TEST(TomlReader, UnknownKeysAreReportedInFileOrderWithASuggestion) {
  Parsed p("[input]\nframes = \"/a\"\nfsp = 25\nzzz = 1\n");
  TableReader root(p.diag, *p.doc, "");
  std::optional<TableReader> input = root.table("input", Need::kRequired);
  input->string("frames", Need::kRequired, "a glob");
  input->number("fps", Need::kOptional, 0, 100);
  input->check_unknown_keys();
  root.check_unknown_keys();
  ASSERT_EQ(p.diag.all().size(), 2u);
  EXPECT_EQ(p.diag.all()[0].key, "input.fsp");
  EXPECT_EQ(p.diag.all()[0].line, 3);
  EXPECT_NE(p.diag.all()[0].message.find("did you mean 'fps'?"), std::string::npos);
  EXPECT_NE(p.diag.all()[0].message.find("expected one of frames, fps"), std::string::npos);
  EXPECT_EQ(p.diag.all()[1].key, "input.zzz");
  EXPECT_EQ(p.diag.all()[1].message.find("did you mean"), std::string::npos);
}

TEST(TomlReader, MissingKeys) {
  Parsed p("[output]\nx = 1\n");
  TableReader root(p.diag, *p.doc, "");
  root.string("pipeline", Need::kRequired, "a pipeline name");
  std::optional<TableReader> out = root.table("output", Need::kRequired);
  out->string("dir", Need::kRequired, "an absolute path");
  ASSERT_EQ(p.diag.all().size(), 2u);
  // The root table has no position; [output] has its header line.
  EXPECT_EQ(p.diag.all()[0].key, "pipeline");
  EXPECT_EQ(p.diag.all()[0].line, 0);
  EXPECT_NE(p.diag.all()[0].message.find("missing key pipeline: expected a pipeline name"),
            std::string::npos);
  EXPECT_EQ(p.diag.all()[1].key, "output.dir");
  EXPECT_EQ(p.diag.all()[1].line, 1);
}

TEST(TomlReader, ChoicesAndNulCharacters) {
  Parsed p("a = \"gif\"\nb = \"x\\u0000y\"\n");
  TableReader r(p.diag, *p.doc, "");
  EXPECT_EQ(r.choice("a", Need::kRequired, {"png", "jpeg"}), std::nullopt);
  EXPECT_EQ(r.string("b", Need::kRequired, "a path"), std::nullopt);
  ASSERT_EQ(p.diag.all().size(), 2u);
  EXPECT_NE(p.diag.all()[0].message.find("expected one of \"png\", \"jpeg\", got \"gif\""),
            std::string::npos);
  EXPECT_NE(p.diag.all()[1].message.find("NUL"), std::string::npos);
}

TEST(TomlReader, SyntaxErrorNamesLineAndKey) {
  Parsed p("version = 1\n[input]\nframes = \"/a/*.png\nfps = 2\n");
  EXPECT_FALSE(p.doc);
  ASSERT_EQ(p.diag.all().size(), 1u);
  const Diagnostic& d = p.diag.first();
  EXPECT_EQ(d.line, 3);
  EXPECT_EQ(d.key, "input.frames");
  EXPECT_NE(d.message.find("syntax error"), std::string::npos) << d.message;
  EXPECT_NE(d.message.find("t.toml"), std::string::npos);
}

TEST(TomlReader, DuplicateKeyIsASyntaxError) {
  Parsed p("a = 1\na = 2\n");
  EXPECT_FALSE(p.doc);
  EXPECT_EQ(p.diag.first().line, 2);
  EXPECT_EQ(p.diag.first().key, "a");
}

TEST(TomlReader, BinaryGarbageNeverThrows) {
  std::string junk;
  for (int i = 0; i < 256; ++i) junk += static_cast<char>(i);
  Parsed p(junk);
  EXPECT_FALSE(p.doc);
  EXPECT_FALSE(p.diag.ok());
}

// Found by mutating job files: a header cut short at the end of the file made
// the key lookup index past the line and abort the process (issue 11).
TEST(TomlReader, UnterminatedHeaderIsASyntaxErrorNotACrash) {
  for (const char* tail : {"[", "[[", "[]", "[ ", "[[]", "[input", "[[input"}) {
    Parsed p(std::string("version = 1\npipeline = \"encode\"\n") + tail);
    EXPECT_FALSE(p.doc) << tail;
    ASSERT_FALSE(p.diag.ok()) << tail;
    EXPECT_EQ(p.diag.first().line, 3) << tail;
    EXPECT_NE(p.diag.first().message.find("t.toml"), std::string::npos) << tail;
  }
  Parsed named("a = 1\n[input\n");
  EXPECT_EQ(named.diag.first().key, "input");
}

// toml11 recurses per nesting level: thousands of '[' or '{' overflowed the
// stack (SIGSEGV in flick validate, the daemon's death in the spool).
TEST(TomlReader, DeepNestingIsRefusedNotAStackOverflow) {
  const std::string prefix = "version = 1\npipeline = \"encode\"\n";
  for (const std::string& value :
       {std::string(100000, '[') + std::string(100000, ']'), std::string(100000, '['), [] {
          std::string v;
          for (int i = 0; i < 50000; ++i) v += "{a=";
          return v + "1" + std::string(50000, '}');
        }()}) {
    Parsed p(prefix + "a = " + value + "\n");
    EXPECT_FALSE(p.doc);
    ASSERT_FALSE(p.diag.ok());
    EXPECT_NE(p.diag.status().message().find("nested more than 64 deep (line 3)"),
              std::string::npos)
        << p.diag.status().message();
  }
}

// The limit counts brackets of values only: not those in strings (basic,
// literal, multi-line, with escaped quotes) or comments, and a document at
// the limit parses.
TEST(TomlReader, NestingLimitIgnoresStringsAndComments) {
  const std::string deep = std::string(64, '[') + "1" + std::string(64, ']');
  const std::string brackets(200, '[');
  Parsed p("a = " + deep + "\nb = \"" + brackets + "\\\"" + brackets + "\"\nc = '" + brackets +
           "'\nd = \"\"\"\n" + brackets + "\n\"\"\"\"\ne = '''" + brackets + "''''\n# " + brackets +
           "\nf = [ # " + brackets + "\n 1 ]\n");
  ASSERT_TRUE(p.doc) << p.diag.status().message();
  EXPECT_EQ(toml::find<std::string>(*p.doc, "b"), brackets + "\"" + brackets);
  EXPECT_EQ(toml::find<std::string>(*p.doc, "d"), brackets + "\n\"");
  EXPECT_EQ(toml::find<std::string>(*p.doc, "e"), brackets + "'");
  Parsed over("a = " + std::string(65, '[') + "1" + std::string(65, ']') + "\n");
  EXPECT_FALSE(over.doc);
}

// Found by tests/fuzz (fuzz_job, fuzz_config): invalid UTF-8 in a literal
// string or a quoted key sent toml11 3.7 reading out of bounds (the release
// build reported "cannot parse: basic_string::_M_create", or worse). Such a
// file is a syntax error at the offending byte.
TEST(TomlReader, InvalidUtf8IsASyntaxError) {
  struct Case {
    std::string text;
    int line, column;
    std::string key;
  };
  const Case cases[] = {
      {"a = '\xff'\n", 1, 6, "a"},
      {"a = 1\nb = '''x\n\xc3'''\n", 3, 1, ""},
      {"[input]\nk = 1\n'\xed\xa0\x80' = 1\n", 3, 2, "input.'\xed\xa0\x80'"},  // a surrogate
      {"x = { 's\xf4\x90\x80\x80' = 1 }\n", 1, 9, "x"},                        // above U+10FFFF
      {"a = \"\xc0\xaf\"\n", 1, 6, "a"},                                       // overlong
      {"# \xfe\nversion = 1\n", 1, 3, ""},
  };
  for (const Case& c : cases) {
    Parsed p(c.text);
    EXPECT_FALSE(p.doc) << c.text;
    ASSERT_EQ(p.diag.all().size(), 1u) << c.text;
    const Diagnostic& d = p.diag.first();
    EXPECT_EQ(d.line, c.line) << c.text;
    EXPECT_EQ(d.column, c.column) << c.text;
    EXPECT_EQ(d.key, c.key) << c.text;
    EXPECT_NE(d.message.find("invalid UTF-8"), std::string::npos) << d.message;
    EXPECT_NE(d.message.find("t.toml:" + std::to_string(c.line)), std::string::npos) << d.message;
  }
  // Valid UTF-8 in the same places still parses.
  Parsed ok("a = '\xc3\xa9'\nb = '''\xf0\x9f\x8e\xac'''\n'\xe2\x82\xac' = \"\xed\x9f\xbf\"\n");
  ASSERT_TRUE(ok.doc) << ok.diag.first().message;
  EXPECT_EQ(toml::find<std::string>(*ok.doc, "a"), "\xc3\xa9");
  EXPECT_EQ(toml::find<std::string>(*ok.doc, "b"), "\xf0\x9f\x8e\xac");
  EXPECT_EQ(toml::find<std::string>(*ok.doc, "\xe2\x82\xac"), "\xed\x9f\xbf");
}

}  // namespace
}  // namespace flick
