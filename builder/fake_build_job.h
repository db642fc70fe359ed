// Test helpers for the builders' unit tests against FakeProcessRunner: a fresh per-test
// directory and a BuildJob of domain "d", candidate "c1" built from <root>/src, whose registry
// credential file (<root>/auth.json) holds `secret` (so tests can prove it reaches no process).
// The build user is `nobody`. Header-only, tests only; not thread-safe (one fixture per test).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "builder/builder.h"

namespace kiln {
namespace testing_build {

inline bool Contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

/// An empty directory named after the running test (removed first if a crashed run left it).
inline std::filesystem::path FreshTestRoot(const std::string& prefix) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::filesystem::path root = std::filesystem::temp_directory_path() /
                               (prefix + "-" + std::to_string(::getpid()) + "-" + info->name());
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root / "src");
  return root;
}

inline BuildJob FakeBuildJob(const std::filesystem::path& root, const std::string& registry_url,
                             const std::string& secret) {
  const std::string host = registry_url.substr(registry_url.find("://") + 3);
  std::ofstream(root / "auth.json")
      << "{\"auths\":{\"" << host << "\":{\"auth\":\"" << secret << "\"}}}";
  BuildJob job;
  job.build_id = "b-1";
  job.domain = "d";
  job.candidate = "c1";
  job.source_dir = (root / "src").string();
  job.build.user = "nobody";
  job.registry.name = "r";
  job.registry.url = registry_url;
  job.registry.auth_file = (root / "auth.json").string();
  job.repository = "d/app";
  job.tag = "c1";
  return job;
}

}  // namespace testing_build
}  // namespace kiln
