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

Diagnostic DC(std::string file, int line, int col, std::string sev, std::string msg,
              std::string code) {
  Diagnostic d = D(std::move(file), line, col, std::move(sev), std::move(msg));
  d.code = std::move(code);
  return d;
}

// Options as the buildah builder passes them, plus the host checkout used for the captures
// made outside a container (see testdata/README.md).
DiagnosticsOptions Opts(std::string repo_root = "", std::string go_module = "") {
  DiagnosticsOptions o;
  o.source_roots = {"/src/", "/workspace"};
  o.repo_root = std::move(repo_root);
  o.go_module = std::move(go_module);
  return o;
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
  EXPECT_LE(got[0].message.size(), 2048u);
  EXPECT_TRUE(got[0].truncated);
  EXPECT_EQ(got[1], D("b.go", 2, 2, "error", "short"));
}

// --- ld / collect2 ------------------------------------------------------------------------------

TEST(DiagnosticsTest, LinkerWithDebugInfoGivesFileAndLine) {
  // gcc -g link.c: ld names the source line; the host checkout path becomes repo-relative.
  EXPECT_EQ(
      ParseDiagnostics(ReadTestdata("gcc_link_debug.txt"), Opts("/tmp/h6cap/cc")),
      (std::vector<Diagnostic>{
          D("", 0, 0, "warning", "relocation against `missing_var' in read-only section `.text'"),
          D("link.c", 5, 0, "error", "undefined reference to `missing'"),
          D("link.c", 5, 0, "error", "undefined reference to `missing_var'"),
          D("", 0, 0, "warning", "creating DT_TEXTREL in a PIE"),
      }));
  // Linking a prebuilt object: the object's source name, no line; objects are never a file.
  auto obj = ParseDiagnostics(ReadTestdata("gcc_link_object.txt"), Opts());
  ASSERT_EQ(obj.size(), 4u);
  EXPECT_EQ(obj[0].file, "");  // "link.o: warning: ..."
  EXPECT_EQ(obj[1], D("link.c", 0, 0, "error", "undefined reference to `missing'"));
  EXPECT_EQ(obj[2], D("link.c", 0, 0, "error", "undefined reference to `missing_var'"));
  EXPECT_EQ(Parse("/usr/bin/ld: libx.a(x.o):(.text+0x1): undefined reference to `y'\n"),
            (std::vector<Diagnostic>{D("", 0, 0, "error", "undefined reference to `y'")}));
}

// --- javac ---------------------------------------------------------------------------------------

TEST(DiagnosticsTest, JavacErrorsWarningsCaretColumnsAndSymbolDetails) {
  EXPECT_EQ(ParseDiagnostics(ReadTestdata("javac.txt"), Opts()),
            (std::vector<Diagnostic>{
                D("src/com/example/Foo.java", 7, 17, "error",
                  "cannot find symbol (symbol: variable x; location: class Foo)"),
                D("src/com/example/Foo.java", 8, 20, "error",
                  "incompatible types: int cannot be converted to String"),
                D("src/com/example/Foo.java", 10, 16, "warning",
                  "[unchecked] unchecked call to add(E) as a member of the raw type List"),
            }));
  // The "2 errors" / "1 warning" counters are not diagnostics; a diagnostic at the very end of
  // the output (no caret follows) is still returned.
  EXPECT_EQ(ParseDiagnostics("/src/A.java:3: error: ';' expected", Opts()),
            (std::vector<Diagnostic>{D("A.java", 3, 0, "error", "';' expected")}));
}

// --- rustc / cargo -------------------------------------------------------------------------------

TEST(DiagnosticsTest, CargoErrorsCarryCodeAndLocationFromArrowLine) {
  auto got = ParseBuildDiagnostics(ReadTestdata("rust_cargo_errors.txt"), Opts());
  EXPECT_FALSE(got.truncated);
  EXPECT_EQ(got.diagnostics,
            (std::vector<Diagnostic>{
                DC("src/main.rs", 6, 18, "error", "E0308: mismatched types", "E0308"),
                DC("src/main.rs", 8, 20, "error",
                   "E0061: this function takes 1 argument but 2 arguments were supplied", "E0061"),
                D("src/main.rs", 1, 4, "note", "function defined here"),
            }));
  // "error: could not compile ..." is a summary: dropped when located errors exist.
  for (const auto& d : got.diagnostics) EXPECT_NE(d.file, "");
}

TEST(DiagnosticsTest, CargoWarningsOnlyAndRustcDirect) {
  EXPECT_EQ(ParseDiagnostics(ReadTestdata("rust_cargo_warnings.txt"), Opts()),
            (std::vector<Diagnostic>{
                D("src/main.rs", 3, 9, "warning", "variable does not need to be mutable"),
                D("src/main.rs", 2, 9, "warning", "unused variable: `unused`"),
            }));
  EXPECT_EQ(ParseDiagnostics(ReadTestdata("rustc_lib.txt"), Opts()),
            (std::vector<Diagnostic>{
                DC("lib.rs", 2, 21, "error", "E0308: mismatched types", "E0308"),
                DC("lib.rs", 3, 5, "error",
                   "E0425: cannot find function `missing_fn` in this scope", "E0425"),
            }));
  // Without any located error, the summary line is what the agent gets.
  EXPECT_EQ(ParseDiagnostics("error: could not compile `demo` (bin \"demo\")\n", Opts()),
            (std::vector<Diagnostic>{
                D("", 0, 0, "error", "error: could not compile `demo` (bin \"demo\")")}));
  // A /workspace path after "-->" is made relative.
  EXPECT_EQ(ParseDiagnostics("warning: unused import\n  --> /workspace/src/lib.rs:10:5\n", Opts()),
            (std::vector<Diagnostic>{D("src/lib.rs", 10, 5, "warning", "unused import")}));
}

// --- tsc -----------------------------------------------------------------------------------------

TEST(DiagnosticsTest, TscPlainAndPrettyFormatsAgree) {
  std::vector<Diagnostic> want = {
      DC("src/a.ts", 5, 7, "error", "TS2322: Type 'string' is not assignable to type 'number'.",
         "TS2322"),
      DC("src/a.ts", 6, 1, "error", "TS2554: Expected 2 arguments, but got 1.", "TS2554"),
      DC("src/a.ts", 7, 13, "error", "TS2304: Cannot find name 'undefinedThing'.", "TS2304"),
  };
  EXPECT_EQ(ParseDiagnostics(ReadTestdata("tsc_plain.txt"), Opts()), want);
  // --pretty: ANSI colours, snippets, related locations and the "Found 3 errors" line.
  EXPECT_EQ(ParseDiagnostics(ReadTestdata("tsc_pretty.txt"), Opts()), want);
  EXPECT_EQ(
      ParseDiagnostics("error TS18003: No inputs were found in config file.\n"
                       "/workspace/b.ts(1,2): warning TS6133: 'x' is declared but never used.\n",
                       Opts()),
      (std::vector<Diagnostic>{
          DC("", 0, 0, "error", "TS18003: No inputs were found in config file.", "TS18003"),
          DC("b.ts", 1, 2, "warning", "TS6133: 'x' is declared but never used.", "TS6133"),
      }));
}

// --- Python --------------------------------------------------------------------------------------

TEST(DiagnosticsTest, PythonTracebackInnermostRepoFrame) {
  EXPECT_EQ(ParseDiagnostics(ReadTestdata("python_nameerror.txt"), Opts("/tmp/h6cap/py")),
            (std::vector<Diagnostic>{D("app/main.py", 10, 0, "error",
                                       "NameError: name 'tax' is not defined. Did you mean: "
                                       "'max'?")}));
  // Frames in /usr/lib/python3.11 are skipped for the innermost one inside the repository.
  EXPECT_EQ(ParseDiagnostics(ReadTestdata("python_stdlib_frames.txt"), Opts("/tmp/h6cap/py")),
            (std::vector<Diagnostic>{D("app/use_json.py", 2, 0, "error",
                                       "json.decoder.JSONDecodeError: Expecting property name "
                                       "enclosed in double quotes: line 1 column 2 (char 1)")}));
  // Nothing inside the repository: the innermost frame is kept (absolute) as the only clue.
  auto outside = ParseDiagnostics(ReadTestdata("python_stdlib_frames.txt"), Opts("/elsewhere"));
  ASSERT_EQ(outside.size(), 1u);
  EXPECT_EQ(outside[0].file, "/usr/lib/python3.11/json/decoder.py");
  EXPECT_EQ(outside[0].line, 353);
}

TEST(DiagnosticsTest, PythonSyntaxErrorWithAndWithoutTraceback) {
  Diagnostic want = D("app/broken.py", 2, 0, "error", "SyntaxError: expected ':'");
  EXPECT_EQ(ParseDiagnostics(ReadTestdata("python_syntaxerror.txt"), Opts("/tmp/h6cap/py")),
            (std::vector<Diagnostic>{want}));
  EXPECT_EQ(ParseDiagnostics(ReadTestdata("python_import_syntaxerror.txt"), Opts("/tmp/h6cap/py")),
            (std::vector<Diagnostic>{want}));
  // Frames without a file in the repository ("<frozen runpy>") give no file.
  EXPECT_EQ(ParseDiagnostics("Traceback (most recent call last):\n"
                             "  File \"<frozen runpy>\", line 198, in _run_module_as_main\n"
                             "ModuleNotFoundError: No module named 'app'\n",
                             Opts()),
            (std::vector<Diagnostic>{
                D("", 0, 0, "error", "ModuleNotFoundError: No module named 'app'")}));
}

TEST(DiagnosticsTest, BuildahRunStepWithPythonTracebackInWorkspace) {
  // Real buildah output: STEP lines, /workspace paths, the summary dropped.
  EXPECT_EQ(ParseDiagnostics(ReadTestdata("buildah_python.txt"), Opts()),
            (std::vector<Diagnostic>{D("app/main.py", 10, 0, "error",
                                       "NameError: name 'tax' is not defined. Did you mean: "
                                       "'max'?")}));
}

// --- pytest --------------------------------------------------------------------------------------

TEST(DiagnosticsTest, PytestFailuresOnePerTestAtTheFailingLine) {
  std::vector<Diagnostic> want = {
      D("tests/test_calc.py", 5, 0, "error", "test_add: AssertionError: assert 2 == 3"),
      D("app/calc.py", 6, 0, "error", "test_parse: NameError: name 'json' is not defined"),
  };
  EXPECT_EQ(ParseDiagnostics(ReadTestdata("pytest_fail.txt"), Opts("/tmp/h6cap/py")), want);
  // The same run inside buildah (STEP 3/5 RUN ... then the error summary).
  EXPECT_EQ(ParseDiagnostics(ReadTestdata("buildah_pytest.txt"), Opts()), want);
}

TEST(DiagnosticsTest, PytestStdlibFramesParametrizedAndClassTests) {
  EXPECT_EQ(ParseDiagnostics(ReadTestdata("pytest_stdlib.txt"), Opts("/tmp/h6cap/py2")),
            (std::vector<Diagnostic>{
                D("tests/test_io.py", 7, 0, "error",
                  "test_decode: json.decoder.JSONDecodeError: Expecting property name enclosed in "
                  "double quotes: line 1 column 2 (char 1)"),
                D("tests/test_io.py", 12, 0, "error", "test_even[1]: AssertionError: 1 is odd"),
                D("tests/test_io.py", 17, 0, "error", "TestGroup.test_method: ValueError: boom"),
            }));
  // Only the short summary (e.g. `pytest --tb=no`): one diagnostic per FAILED/ERROR line.
  EXPECT_EQ(ParseDiagnostics("FAILED tests/test_x.py::TestA::test_y - AssertionError: no\n"
                             "FAILED tests/test_x.py::test_z\n"
                             "ERROR tests/test_c.py - ModuleNotFoundError: No module named 'q'\n",
                             Opts()),
            (std::vector<Diagnostic>{
                D("tests/test_x.py", 0, 0, "error", "TestA.test_y: AssertionError: no"),
                D("tests/test_x.py", 0, 0, "error", "test_z: failed"),
                D("tests/test_c.py", 0, 0, "error",
                  "ERROR collecting tests/test_c.py: ModuleNotFoundError: No module named 'q'"),
            }));
}

// --- go test -------------------------------------------------------------------------------------

TEST(DiagnosticsTest, GoTestFailuresResolvedToThePackageDirectory) {
  std::vector<Diagnostic> want = {
      D("main_test.go", 6, 0, "error", "TestRoot: root failed"),
      D("pkg/calc/calc_test.go", 7, 0, "error", "TestAdd: got 0 want 2"),
      D("pkg/calc/calc_test.go", 15, 0, "error", "TestTable/neg: Add(1, 2) = -1, want 3"),
  };
  EXPECT_EQ(ParseDiagnostics(ReadTestdata("go_test.txt"), Opts("", "example.com/m")), want);
  // -v: output precedes the "--- FAIL" lines.
  EXPECT_EQ(ParseDiagnostics(ReadTestdata("go_test_v.txt"), Opts("", "example.com/m")),
            (std::vector<Diagnostic>{want[1], want[2]}));
  // Unknown module with a dotted host: the base name only.
  auto guess = ParseDiagnostics(ReadTestdata("go_test.txt"), Opts());
  ASSERT_EQ(guess.size(), 3u);
  EXPECT_EQ(guess[1].file, "calc_test.go");
  // A dot-less module path is taken as the module; t.Log of a passing test (-v) is no failure.
  EXPECT_EQ(
      ParseDiagnostics("=== RUN   TestOk\n"
                       "    ok_test.go:3: just logging\n"
                       "--- PASS: TestOk (0.00s)\n"
                       "=== RUN   TestBad\n"
                       "    bad_test.go:9: want 1\n"
                       "--- FAIL: TestBad (0.00s)\n"
                       "FAIL\n"
                       "FAIL\tapp/internal/x\t0.003s\n",
                       Opts()),
      (std::vector<Diagnostic>{D("internal/x/bad_test.go", 9, 0, "error", "TestBad: want 1")}));
}

// --- mypy / flake8 -------------------------------------------------------------------------------

TEST(DiagnosticsTest, MypyErrorsKeepTheirCode) {
  EXPECT_EQ(ParseDiagnostics(ReadTestdata("mypy.txt"), Opts()),
            (std::vector<Diagnostic>{
                DC("app/typed.py", 5, 0, "error",
                   "Incompatible types in assignment (expression has type \"str\", variable has "
                   "type \"int\")  [assignment]",
                   "assignment"),
                DC("app/typed.py", 10, 0, "error",
                   "Unsupported operand types for + (\"str\" and \"int\")  [operator]", "operator"),
                DC("app/typed.py", 13, 0, "error",
                   "List item 0 has incompatible type \"str\"; expected \"int\"  [list-item]",
                   "list-item"),
            }));
  EXPECT_EQ(
      ParseDiagnostics("app/x.py:4:5: note: Revealed type is \"builtins.int\"\n", Opts()),
      (std::vector<Diagnostic>{D("app/x.py", 4, 5, "note", "Revealed type is \"builtins.int\"")}));
}

TEST(DiagnosticsTest, Flake8CodesAndSeverities) {
  auto got = ParseDiagnostics(ReadTestdata("flake8.txt"), Opts());
  ASSERT_EQ(got.size(), 7u);
  EXPECT_EQ(got[0], DC("app/style.py", 1, 1, "error", "F401 'os' imported but unused", "F401"));
  EXPECT_EQ(got[2],
            DC("app/style.py", 3, 1, "error", "E302 expected 2 blank lines, found 0", "E302"));
  EXPECT_EQ(got[4],
            DC("app/style.py", 5, 14, "error", "F821 undefined name 'undefined_name'", "F821"));
  EXPECT_EQ(got[6], DC("app/style.py", 6, 8, "error",
                       "E701 multiple statements on one line (colon)", "E701"));
  EXPECT_EQ(
      ParseDiagnostics("/workspace/a.py:9:80: W291 trailing whitespace\n", Opts()),
      (std::vector<Diagnostic>{DC("a.py", 9, 80, "warning", "W291 trailing whitespace", "W291")}));
}

// --- bounds and paths ----------------------------------------------------------------------------

TEST(DiagnosticsTest, LongMessagesAreCutOnUtf8BoundaryAndFlagged) {
  DiagnosticsOptions o = Opts();
  o.max_message_bytes = 10;
  auto got = ParseBuildDiagnostics("a.go:1:1: abcdefghi\xc3\xa9xyz\nb.go:2:2: short\n", o);
  ASSERT_EQ(got.diagnostics.size(), 2u);
  EXPECT_EQ(got.diagnostics[0].message, "abcdefghi");  // the 2-byte 'é' does not fit
  EXPECT_TRUE(got.diagnostics[0].truncated);
  EXPECT_FALSE(got.diagnostics[1].truncated);
  EXPECT_FALSE(got.truncated);
  EXPECT_EQ(ToJson(got.diagnostics[0])["truncated"], true);
  EXPECT_FALSE(ToJson(got.diagnostics[1]).contains("truncated"));
  // Default bound: 2 KiB.
  auto def = ParseDiagnostics("a.go:1:1: " + std::string(5000, 'x') + "\n", Opts());
  ASSERT_EQ(def.size(), 1u);
  EXPECT_EQ(def[0].message.size(), 2048u);
  EXPECT_TRUE(def[0].truncated);
}

TEST(DiagnosticsTest, OverallCountBoundIsFlaggedAndDefaultsTo50) {
  std::string out;
  for (int i = 1; i <= 80; ++i) out += "a.go:" + std::to_string(i) + ":1: e\n";
  auto got = ParseBuildDiagnostics(out, Opts());
  EXPECT_EQ(got.diagnostics.size(), 50u);
  EXPECT_TRUE(got.truncated);
  EXPECT_EQ(got.diagnostics.back().line, 50);
  DiagnosticsOptions o = Opts();
  o.max_diagnostics = 80;
  EXPECT_FALSE(ParseBuildDiagnostics(out, o).truncated);
}

TEST(DiagnosticsTest, OutsideRepoDiagnosticsYieldSlotsToRepoOnes) {
  std::string out =
      "/usr/include/x.h:1:1: note: sys 1\n"
      "/usr/include/x.h:2:1: note: sys 2\n"
      "/src/a.cc:3:1: error: mine 1\n"
      "/src/a.cc:4:1: error: mine 2\n";
  DiagnosticsOptions o = Opts();
  o.max_diagnostics = 3;
  auto got = ParseBuildDiagnostics(out, o);
  EXPECT_TRUE(got.truncated);
  EXPECT_EQ(got.diagnostics, (std::vector<Diagnostic>{D("/usr/include/x.h", 1, 1, "note", "sys 1"),
                                                      D("a.cc", 3, 1, "error", "mine 1"),
                                                      D("a.cc", 4, 1, "error", "mine 2")}));
  o.max_diagnostics = 2;
  EXPECT_EQ(ParseDiagnostics(out, o),
            (std::vector<Diagnostic>{D("a.cc", 3, 1, "error", "mine 1"),
                                     D("a.cc", 4, 1, "error", "mine 2")}));
}

TEST(DiagnosticsTest, ToJsonCodeOnlyWhenPresent) {
  EXPECT_EQ(ToJson(DC("a.rs", 1, 2, "error", "E0308: mismatched types", "E0308")),
            nlohmann::json::parse(R"({"file":"a.rs","line":1,"column":2,"severity":"error",
                                      "message":"E0308: mismatched types","code":"E0308"})"));
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
  std::string real = ReadTestdata("gcc_broken.txt") + ReadTestdata("buildah_go.txt") +
                     ReadTestdata("rust_cargo_errors.txt") + ReadTestdata("javac.txt") +
                     ReadTestdata("pytest_stdlib.txt") + ReadTestdata("python_stdlib_frames.txt") +
                     ReadTestdata("go_test_v.txt") + ReadTestdata("tsc_pretty.txt");
  for (int iter = 0; iter < 500; ++iter) {
    std::string s = real;
    for (int k = 0; k < 20; ++k) s[rng() % s.size()] = static_cast<char>(rng() % 256);
    auto got = Parse(s);
    for (const auto& d : got) EXPECT_NO_THROW(ToJson(d).dump());
  }
}

}  // namespace
}  // namespace kiln

// --- Issue 16: the failing Containerfile step ---
namespace kiln {
namespace {

TEST(FailedStepTest, NamesTheInstructionItsPositionAndExitCode) {
  auto s = FindFailedStep(ReadTestdata("buildah_go.txt"));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->position, "5/5");
  EXPECT_EQ(s->instruction, "RUN mkdir -p /tmp && go build ./...");
  EXPECT_EQ(s->exit_code, 2);
  EXPECT_EQ(DescribeFailedStep(*s),
            "step 5/5 (RUN mkdir -p /tmp && go build ./...) failed with exit code 2");
  s = FindFailedStep(ReadTestdata("buildah_pytest.txt"));
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->position, "3/5");
  EXPECT_EQ(s->exit_code, 1);
  EXPECT_EQ(s->instruction.rfind("RUN cd /workspace && ", 0), 0u) << s->instruction;
}

TEST(FailedStepTest, OlderBuildahWordingAndMultiStageBuilds) {
  auto s = FindFailedStep(
      "[1/2] STEP 1/3: FROM r/kiln/go:1 AS build\n[1/2] STEP 2/3: RUN go test ./...\n--- FAIL: "
      "TestX (0.00s)\n"
      "error building at STEP \"RUN go test ./...\": error while running runtime: exit status 1\n");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->position, "2/3");
  EXPECT_EQ(s->exit_code, 1);
  EXPECT_EQ(DescribeFailedStep(*s), "step 2/3 (RUN go test ./...) failed with exit code 1");
}

TEST(FailedStepTest, AnUnknownInstructionIsNamedAsBuildahCutIt) {
  // buildah 1.28's own output for "RUNN echo hello" (captured by failures_e2e).
  auto s = FindFailedStep(
      "STEP 1/5: FROM 127.0.0.1:5190/kiln/busybox:1\nSTEP 2/5: RUNN echo hello\n"
      "Error: building at STEP \"RUNN \": Build error: Unknown instruction: \"RUNN\" "
      "&imagebuilder.Step{}\n");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->position, "2/5");
  EXPECT_EQ(s->instruction, "RUNN ");
  EXPECT_EQ(s->exit_code, -1);
}

TEST(FailedStepTest, RunInstructions) {
  EXPECT_TRUE(IsRunInstruction("RUN go test ./..."));
  EXPECT_TRUE(IsRunInstruction("run\tmake"));
  EXPECT_TRUE(IsRunInstruction("RUN --mount=type=cache,target=/c go build"));
  EXPECT_FALSE(IsRunInstruction("RUNN "));
  EXPECT_FALSE(IsRunInstruction("COPY . /src"));
  EXPECT_FALSE(IsRunInstruction(""));
}

TEST(FailedStepTest, NoSummaryNoStep) {
  EXPECT_FALSE(FindFailedStep("STEP 1/2: FROM x\nError: no such file\n").has_value());
  EXPECT_FALSE(FindFailedStep("").has_value());
  auto s = FindFailedStep("Error: building at STEP \"RUN x\": something\n");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->position, "");
  EXPECT_EQ(s->exit_code, -1);
  EXPECT_EQ(DescribeFailedStep(*s), "step (RUN x) failed");
}

TEST(FailedStepTest, LongInstructionsAreBounded) {
  std::string run = "RUN echo " + std::string(500, 'x');
  auto s = FindFailedStep("Error: building at STEP \"" + run + "\": exit status 3\n");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->instruction.size(), 203u);
  EXPECT_EQ(s->exit_code, 3);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(GoModulePathTest, ReadsTheModuleDirective) {
  EXPECT_EQ(GoModulePath("// c\nmodule example.com/m // trailing\n\ngo 1.19\n"), "example.com/m");
  EXPECT_EQ(GoModulePath("module \"github.com/a/b\"\n"), "github.com/a/b");
  EXPECT_EQ(GoModulePath("go 1.19\nrequire x v1\n"), "");
  EXPECT_EQ(GoModulePath("modules x\n"), "");
}

TEST(GoModulePathTest, GoTestPackagePathsBecomeRepoRelative) {
  // go test prints "FAIL example.com/m/pkg/calc" and "calc_test.go:14: ..." lines; with the
  // module path from go.mod the file is placed in its package directory.
  DiagnosticsOptions o;
  o.source_roots = {"/src/"};
  o.go_module = GoModulePath("module example.com/m\n");
  auto d = ParseDiagnostics(ReadTestdata("go_test.txt"), o);
  bool in_pkg = false;
  for (const auto& x : d) in_pkg = in_pkg || x.file.rfind("pkg/calc/", 0) == 0;
  EXPECT_TRUE(in_pkg);
}

}  // namespace
}  // namespace kiln
