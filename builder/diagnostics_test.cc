#include "builder/diagnostics.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

namespace kiln {

// gtest prints diagnostics as JSON in failure messages (found by ADL).
void PrintTo(const Diagnostic& d, std::ostream* os) { *os << ToJson(d).dump(); }

namespace {

std::string ReadTestdata(const std::string& name) {
  std::ifstream f(std::string(KILN_BUILDER_TESTDATA) + "/" + name, std::ios::binary);
  EXPECT_TRUE(f.good()) << "missing testdata " << name;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Diagnostic D(std::string file, int line, int col, std::string sev, std::string msg) {
  Diagnostic d;
  d.file = std::move(file);
  d.line = line;
  d.column = col;
  d.severity = std::move(sev);
  d.message = std::move(msg);
  return d;
}

std::vector<Diagnostic> Parse(std::string_view out, std::vector<std::string> roots = {"/src/"}) {
  DiagnosticsOptions o;
  o.source_roots = std::move(roots);
  return ParseDiagnostics(out, o);
}

TEST(DiagnosticsTest, GoBuildMultiplePackages) {
  auto got = Parse(ReadTestdata("go_build.txt"));
  std::vector<Diagnostic> want = {
      D("pkg/b/b.go", 4, 17, "error", "undefined: z"),
      D("pkg/b/b.go", 8, 9, "error",
        "cannot use Add(1, 2) (value of type int) as type string in return statement"),
      D("pkg/a/a.go", 4, 2, "error", "imported and not used: \"os\""),
      D("pkg/a/a.go", 9, 14, "error",
        "cannot use \"text\" (untyped string constant) as int value in variable declaration"),
      D("pkg/a/a.go", 10, 9, "error", "undefined: undefinedName"),
  };
  EXPECT_EQ(got, want);
}

TEST(DiagnosticsTest, GoTooManyErrorsLineIsDropped) {
  auto got = Parse(ReadTestdata("go_too_many.txt"));
  ASSERT_EQ(got.size(), 10u);
  EXPECT_EQ(got.front(), D("pkg/many/many.go", 4, 8, "error", "undefined: undefined0"));
  EXPECT_EQ(got.back(), D("pkg/many/many.go", 13, 8, "error", "undefined: undefined9"));
  for (const auto& d : got) EXPECT_NE(d.message, "too many errors");
}

TEST(DiagnosticsTest, GoVetAndVetPrefix) {
  EXPECT_EQ(
      Parse(ReadTestdata("go_vet.txt")),
      (std::vector<Diagnostic>{
          D("pkg/vet/vet.go", 6, 2, "error", "fmt.Printf format %s has arg n of wrong type int"),
          D("pkg/vet/vet.go", 7, 9, "error",
            "fmt.Sprintf format %d reads arg #1, but call has 0 args"),
      }));
  // "vet: pkg/a/a.go:9:14: ..." (vet's own type-check failure) loses the "vet: " prefix.
  EXPECT_EQ(
      Parse(ReadTestdata("go_vet_typeerr.txt")),
      (std::vector<Diagnostic>{D(
          "pkg/a/a.go", 9, 14, "error",
          "cannot use \"text\" (untyped string constant) as int value in variable declaration")}));
}

TEST(DiagnosticsTest, GoDotSlashStrippedAndMissingPackages) {
  auto dot = Parse(ReadTestdata("go_dot.txt"));
  ASSERT_EQ(dot.size(), 2u);
  EXPECT_EQ(dot[0], D("b.go", 4, 17, "error", "undefined: z"));
  EXPECT_EQ(
      Parse(ReadTestdata("go_missing_pkg.txt")),
      (std::vector<Diagnostic>{
          D("main.go", 6, 2, "error",
            "no required module provides package example.com/m/nothere; to add it:"),
          D("main.go", 5, 2, "error", "package foo is not in GOROOT (/usr/lib/go-1.19/src/foo)"),
      }));
}

TEST(DiagnosticsTest, BuildahRunOutputIsParsedAndSummaryDroppedWhenErrorsExist) {
  auto got = Parse(ReadTestdata("buildah_go.txt"));
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[0], D("pkg/b/b.go", 4, 17, "error", "undefined: z"));
  EXPECT_EQ(got[4], D("pkg/a/a.go", 10, 9, "error", "undefined: undefinedName"));
  for (const auto& d : got) EXPECT_NE(d.file, "") << d.message;
}

TEST(DiagnosticsTest, BuildahAbsoluteSourceRootIsStripped) {
  auto got = Parse(ReadTestdata("buildah_go_abs.txt"));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], D("pkg/a/a.go", 4, 2, "error", "imported and not used: \"os\""));
  // A root without trailing slash works the same; without roots the path stays absolute.
  EXPECT_EQ(Parse(ReadTestdata("buildah_go_abs.txt"), {"/src"})[0].file, "pkg/a/a.go");
  EXPECT_EQ(Parse(ReadTestdata("buildah_go_abs.txt"), {})[0].file, "/src/pkg/a/a.go");
  EXPECT_EQ(Parse(ReadTestdata("buildah_go_abs.txt"), {"/workspace/", "/src/"})[0].file,
            "pkg/a/a.go");
}

TEST(DiagnosticsTest, BuildahStepFailureWithoutCompilerOutputIsKept) {
  EXPECT_EQ(
      Parse(ReadTestdata("buildah_nodiag.txt")),
      (std::vector<Diagnostic>{D(
          "", 0, 0, "error", "building at STEP \"RUN echo compiling && false\": exit status 1")}));
  // Older buildah spelling.
  EXPECT_EQ(
      Parse("error building at STEP \"RUN go build ./...\": exit status 1\n"),
      (std::vector<Diagnostic>{
          D("", 0, 0, "error", "error building at STEP \"RUN go build ./...\": exit status 1")}));
  // Only warnings found: the summary is still the error to report.
  auto warn_only =
      Parse("x.go:1:2: warning: meh\nError: building at STEP \"RUN x\": exit status 1\n");
  ASSERT_EQ(warn_only.size(), 2u);
  EXPECT_EQ(warn_only[1].severity, "error");
  EXPECT_EQ(warn_only[1].file, "");
}

TEST(DiagnosticsTest, GccErrorsNotesAndWarnings) {
  auto got = Parse(ReadTestdata("gcc_broken.txt"));
  ASSERT_EQ(got.size(), 15u);  // the repeated "invalid conversion" error is deduped
  EXPECT_EQ(got[0], D("util.h", 5, 30, "error", "‘missing_symbol’ was not declared in this scope"));
  EXPECT_EQ(got[1],
            D("broken.cc", 17, 7, "error", "no matching function for call to ‘Take(Point&)’"));
  EXPECT_EQ(got[2], D("broken.cc", 11, 6, "note", "candidate: ‘void Take(int, int)’"));
  EXPECT_EQ(got[3], D("broken.cc", 11, 6, "note", "candidate expects 2 arguments, 1 provided"));
  EXPECT_EQ(got[8].file, "/usr/include/c++/12/bits/stl_vector.h");
  EXPECT_EQ(got[8].line, 1276);
  EXPECT_EQ(got[8].severity, "note");
  EXPECT_EQ(got[10], D("broken.cc", 20, 15, "error",
                       "invalid conversion from ‘const char*’ to ‘std::vector<int>::value_type’ "
                       "{aka ‘int’} [-fpermissive]"));
  EXPECT_EQ(got[14],
            D("broken.cc", 15, 7, "warning", "unused variable ‘unused_var’ [-Wunused-variable]"));
  int errors = 0;
  for (const auto& d : got) errors += d.severity == "error";
  EXPECT_EQ(errors, 6);
}

TEST(DiagnosticsTest, GccColorOutputParsesLikePlain) {
  auto color = Parse(ReadTestdata("gcc_color.txt"));
  auto plain = Parse(ReadTestdata("gcc_broken.txt"));
  ASSERT_EQ(color.size(), plain.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    Diagnostic p = plain[i];
    if (p.file[0] != '/') p.file = "cc/" + p.file;  // compiled as cc/broken.cc
    EXPECT_EQ(color[i], p) << i;
  }
}

TEST(DiagnosticsTest, ClangErrorsAndCandidateNotes) {
  auto got = Parse(ReadTestdata("clang_broken.txt"));
  ASSERT_EQ(got.size(), 9u);
  EXPECT_EQ(got[0], D("util.h", 5, 30, "error", "use of undeclared identifier 'missing_symbol'"));
  EXPECT_EQ(got[1], D("broken.cc", 17, 3, "error", "no matching function for call to 'Take'"));
  EXPECT_EQ(got[3], D("broken.cc", 11, 6, "note",
                      "candidate function not viable: requires 2 arguments, but 1 was provided"));
  EXPECT_EQ(got[8], D("broken.cc", 21, 12, "error", "no member named 'z' in 'Point'"));
}

TEST(DiagnosticsTest, ClangWarningsOnly) {
  auto got = Parse(ReadTestdata("clang_warn.txt"));
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[0], D("warn.cc", 3, 9, "warning",
                      "using the result of an assignment as a condition without parentheses "
                      "[-Wparentheses]"));
  EXPECT_EQ(got[2], D("warn.cc", 3, 9, "note",
                      "use '==' to turn this assignment into an equality comparison"));
}

TEST(DiagnosticsTest, FatalErrorIsError) {
  EXPECT_EQ(Parse(ReadTestdata("gcc_fatal.txt")),
            (std::vector<Diagnostic>{
                D("fatal.cc", 1, 10, "error", "does_not_exist.h: No such file or directory")}));
  EXPECT_EQ(Parse(ReadTestdata("clang_fatal.txt")),
            (std::vector<Diagnostic>{
                D("fatal.cc", 1, 10, "error", "'does_not_exist.h' file not found")}));
}

TEST(DiagnosticsTest, LinkerErrorsNameTheSourceFileWhenGiven) {
  std::vector<Diagnostic> undefined = {
      D("link.cc", 0, 0, "error", "undefined reference to `Foo(int)'"),
      D("link.cc", 0, 0, "error", "undefined reference to `global_missing'"),
  };
  EXPECT_EQ(Parse(ReadTestdata("clang_link.txt")), undefined);
  auto gcc = Parse(ReadTestdata("gcc_link.txt"));
  ASSERT_EQ(gcc.size(), 4u);
  EXPECT_EQ(gcc[1], undefined[0]);
  EXPECT_EQ(gcc[2], undefined[1]);
  EXPECT_EQ(gcc[3], D("", 0, 0, "warning", "creating DT_TEXTREL in a PIE"));
  // The one-line form from the brief, and lld's.
  EXPECT_EQ(Parse("/usr/bin/ld: main.o: in function `main': main.c:(.text+0x5): undefined "
                  "reference to `foo'\n"),
            (std::vector<Diagnostic>{D("main.c", 0, 0, "error", "undefined reference to `foo'")}));
  EXPECT_EQ(Parse("ld.lld: error: undefined symbol: bar\n"),
            (std::vector<Diagnostic>{D("", 0, 0, "error", "undefined symbol: bar")}));
  // collect2's summary shows only when nothing better was found.
  EXPECT_EQ(Parse("collect2: error: ld returned 1 exit status\n"),
            (std::vector<Diagnostic>{
                D("", 0, 0, "error", "collect2: error: ld returned 1 exit status")}));
}

TEST(DiagnosticsTest, LineWithoutColumnAndIgnoredDecorations) {
  auto got = Parse(
      "# example.com/m/pkg\n"
      "./pkg/x.go:12: something odd\n"
      "x.cc: In function 'int main()':\n"
      "In file included from a.h:3,\n"
      "                 from b.cc:4:\n"
      "    5 | int x = y;\n"
      "      |         ^\n"
      "STEP 2/3: RUN go build ./...\n"
      "[1/2] STEP 1/4: FROM golang:1.19 AS build\n"
      "subprocess exited with status 2\n"
      "2024/01/02 12:00:00 starting\n"
      "see http://host:8080: for details\n"
      "3 errors generated.\n");
  EXPECT_EQ(got, (std::vector<Diagnostic>{D("pkg/x.go", 12, 0, "error", "something odd")}));
}

TEST(DiagnosticsTest, CrlfAndAnsiAreStripped) {
  auto got = Parse(
      "\x1b[1m./a.go:1:2:\x1b[0m \x1b[31merror: \x1b[0mbad thing\r\n"
      "b.go:3:4: \x1b]8;;http://x\x07linked\x1b]8;;\x07 msg\r\n");
  EXPECT_EQ(got, (std::vector<Diagnostic>{D("a.go", 1, 2, "error", "bad thing"),
                                          D("b.go", 3, 4, "error", "linked msg")}));
  EXPECT_EQ(StripAnsi("a\x1b[01;31m\x1b[Kb\x1b"), "ab");
}

TEST(DiagnosticsTest, OverflowingNumbersRejectTheLine) {
  auto got = Parse(
      "a.go:99999999999:1: huge line\n"
      "a.go:1:2147483648: huge column\n"
      "a.go:2147483647:2: max ok\n");
  EXPECT_EQ(got, (std::vector<Diagnostic>{D("a.go", 2147483647, 2, "error", "max ok")}));
}

TEST(DiagnosticsTest, DuplicatesRemovedAndCountBounded) {
  std::string out;
  for (int i = 0; i < 500; ++i) out += "a.go:" + std::to_string(i % 300 + 1) + ":1: e\n";
  DiagnosticsOptions o;
  o.max_diagnostics = 250;
  auto got = ParseDiagnostics(out, o);
  ASSERT_EQ(got.size(), 250u);
  EXPECT_EQ(got[249].line, 250);
  o.max_diagnostics = 1000;
  EXPECT_EQ(ParseDiagnostics(out, o).size(), 300u);
  o.max_diagnostics = 0;
  EXPECT_TRUE(ParseDiagnostics(out, o).empty());
}

TEST(DiagnosticsTest, InvalidUtf8AndControlBytesAreSanitized) {
  auto got = Parse(std::string("a.go:1:1: bad \xff\xfe byte\x01 and \xe2\x80 cut\n"));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].message, "bad \xEF\xBF\xBD\xEF\xBF\xBD byte  and \xEF\xBF\xBD\xEF\xBF\xBD cut");
  EXPECT_NO_THROW(ToJson(got[0]).dump());
}

TEST(DiagnosticsTest, ToJsonFields) {
  auto j = ToJson(D("a.go", 3, 4, "warning", "m"));
  EXPECT_EQ(j, nlohmann::json::parse(
                   R"({"file":"a.go","line":3,"column":4,"severity":"warning","message":"m"})"));
}

TEST(DiagnosticsTest, VeryLongLinesAreBounded) {
  std::string long_msg(1 << 20, 'x');
  auto got = Parse("a.go:1:1: " + long_msg + "\nb.go:2:2: short\n" + std::string(1 << 20, ':'));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_LE(got[0].message.size(), 4096u);
  EXPECT_EQ(got[1], D("b.go", 2, 2, "error", "short"));
}

TEST(DiagnosticsTest, RandomBytesNeverCrash) {
  std::mt19937 rng(12345);
  const std::string alphabet = "ab./:0123456789 \t\r\n\x1b[]();'`\"#-error:warning:note:\xff\xc3";
  for (int iter = 0; iter < 2000; ++iter) {
    std::string s;
    size_t len = rng() % 512;
    for (size_t i = 0; i < len; ++i) {
      s += (rng() % 2) ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()];
    }
    DiagnosticsOptions o;
    o.source_roots = {"/src/", "", "a"};
    o.max_diagnostics = 50;
    auto got = ParseDiagnostics(s, o);
    ASSERT_LE(got.size(), 50u);
    for (const auto& d : got) {
      EXPECT_NO_THROW(ToJson(d).dump());
      EXPECT_TRUE(d.severity == "error" || d.severity == "warning" || d.severity == "note");
      EXPECT_GE(d.line, 0);
      EXPECT_GE(d.column, 0);
    }
  }
  // Mutations of real output.
  std::string real = ReadTestdata("gcc_broken.txt") + ReadTestdata("buildah_go.txt");
  for (int iter = 0; iter < 500; ++iter) {
    std::string s = real;
    for (int k = 0; k < 20; ++k) s[rng() % s.size()] = static_cast<char>(rng() % 256);
    auto got = Parse(s);
    for (const auto& d : got) EXPECT_NO_THROW(ToJson(d).dump());
  }
}

}  // namespace
}  // namespace kiln
