#include "builder/step_cache_policy.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

const std::map<std::string, std::string> kArgs = {{"KILN_REGISTRY", "127.0.0.1:5000"}};

bool Layers(const std::string& text, const std::string& mode = "auto") {
  return DecideStepCache(text, kArgs, mode).use_layers;
}

TEST(StepCachePolicy, EveryRunAfterTheWholeContextBuildsWithoutTheStepCache) {
  // The benchmark's Containerfile: nothing in it can ever be reused by a new commit.
  const std::string cf =
      "ARG KILN_REGISTRY\n"
      "FROM ${KILN_REGISTRY}/kiln/go-builder:1.19 AS build\n"
      "WORKDIR /src\n"
      "COPY . .\n"
      "RUN --mount=type=cache,id=gocache,target=/root/.cache/go-build go build -o /out/app .\n"
      "FROM ${KILN_REGISTRY}/kiln/busybox:1\n"
      "COPY --from=build /out/app /app\n"
      "ENTRYPOINT [\"/app\"]\n";
  StepCacheDecision d = DecideStepCache(cf, kArgs, "auto");
  EXPECT_FALSE(d.use_layers);
  EXPECT_NE(d.reason.find("--layers=false"), std::string::npos) << d.reason;
}

TEST(StepCachePolicy, ARunBeforeTheWholeContextKeepsTheStepCache) {
  // The classic dependency step: its result survives every commit that leaves go.mod alone.
  const std::string cf =
      "FROM golang:1.22 AS build\n"
      "WORKDIR /src\n"
      "COPY go.mod go.sum ./\n"
      "RUN go mod download\n"
      "COPY . .\n"
      "RUN go build -o /out/app .\n"
      "FROM busybox\n"
      "COPY --from=build /out/app /app\n";
  StepCacheDecision d = DecideStepCache(cf, kArgs, "auto");
  EXPECT_TRUE(d.use_layers);
  EXPECT_NE(d.reason.find("line 4"), std::string::npos) << d.reason;
}

TEST(StepCachePolicy, ARunInAStageThatNeverSeesTheContextKeepsTheStepCache) {
  EXPECT_TRUE(
      Layers("FROM alpine AS tools\nRUN apk add make\n"
             "FROM golang AS build\nCOPY . .\nRUN go build ./...\n"
             "FROM busybox\nCOPY --from=tools /usr/bin/make /make\n"
             "COPY --from=build /go/bin/app /app\n"));
  // A final stage that installs packages before copying the binary.
  EXPECT_TRUE(
      Layers("FROM golang AS build\nCOPY . .\nRUN go build -o /app .\n"
             "FROM debian\nRUN apt-get update\nCOPY --from=build /app /app\n"));
}

TEST(StepCachePolicy, DependenceOnTheContextFollowsStagesAndMounts) {
  // A stage derived from a context-dependent stage depends on the context too.
  EXPECT_FALSE(
      Layers("FROM golang AS build\nCOPY . .\nRUN go build ./...\n"
             "FROM build AS test\nRUN go test ./...\n"
             "FROM 0\nRUN true\n"));
  // A RUN after COPY --from of a context-dependent stage.
  EXPECT_FALSE(
      Layers("FROM golang AS build\nCOPY . .\nRUN go build -o /app .\n"
             "FROM debian\nCOPY --from=build /app /app\nRUN chmod 0755 /app\n"));
  // A bind mount of the context (no from=) is the whole context.
  EXPECT_FALSE(Layers("FROM golang\nRUN --mount=type=bind,target=/src cd /src && go build .\n"));
  EXPECT_FALSE(Layers("FROM golang\nRUN --mount=target=/src go build /src\n"));
  // A bind mount from a stage that never saw the context does not.
  EXPECT_TRUE(
      Layers("FROM alpine AS tools\nRUN apk add make\n"
             "FROM golang\nRUN --mount=type=bind,from=tools,target=/t ls /t\n"));
  // A cache mount alone is not the context.
  EXPECT_TRUE(Layers("FROM golang\nRUN --mount=type=cache,target=/root/.cache go version\n"));
}

TEST(StepCachePolicy, WholeContextSpellingsAndPartialCopies) {
  for (const char* src : {".", "./", "./.", "*", "/", "[\".\", \"/src\"]"}) {
    const std::string copy =
        src[0] == '[' ? std::string("COPY ") + src : std::string("COPY ") + src + " /src";
    EXPECT_FALSE(Layers("FROM golang\n" + copy + "\nRUN go build ./...\n")) << copy;
  }
  // A sub-tree or named files are not the whole context: a later RUN can be reused.
  EXPECT_TRUE(Layers("FROM golang\nCOPY src/ /src\nRUN go build ./...\n"));
  EXPECT_TRUE(Layers("FROM golang\nCOPY --chown=1000 go.mod go.sum /src/\nRUN go mod download\n"));
  // ADD of the whole context is the context; ADD of a URL is a reusable step before it.
  EXPECT_FALSE(Layers("FROM golang\nADD . /src\nRUN make\n"));
  EXPECT_TRUE(Layers("FROM golang\nADD https://example.com/x.tgz /x.tgz\nCOPY . .\nRUN make\n"));
  // A build arg that names the context.
  EXPECT_FALSE(DecideStepCache("FROM golang\nARG SRC=.\nCOPY ${SRC} /src\nRUN make\n", {}, "auto")
                   .use_layers);
}

TEST(StepCachePolicy, WhatItDoesNotKnowKeepsTheStepCache) {
  EXPECT_TRUE(Layers("FROM golang\nONBUILD RUN make\nCOPY . .\nRUN make\n"));
  EXPECT_TRUE(Layers("FROM golang\nFROBNICATE x\nCOPY . .\nRUN make\n"));
  EXPECT_TRUE(Layers("FROM ${UNKNOWN}\nCOPY . .\nRUN make\n"));
  EXPECT_TRUE(Layers(""));
  EXPECT_TRUE(Layers("# only a comment\n"));
  // Continuations and comments inside do not hide a RUN before the context.
  EXPECT_TRUE(
      Layers("FROM golang\nRUN apt-get update \\\n# a comment\n  && apt-get install -y make\n"
             "COPY . .\nRUN make\n"));
}

TEST(StepCachePolicy, TheConfigOverridesIt) {
  const std::string reusable = "FROM golang\nRUN go version\nCOPY . .\nRUN make\n";
  const std::string not_reusable = "FROM golang\nCOPY . .\nRUN make\n";
  EXPECT_FALSE(Layers(reusable, "never"));
  EXPECT_TRUE(Layers(not_reusable, "always"));
  EXPECT_NE(DecideStepCache(reusable, kArgs, "never").reason.find("step_cache"), std::string::npos);
}

}  // namespace
}  // namespace kiln
