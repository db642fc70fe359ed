#include "tests/integration/test_registry.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/integration/command.h"

namespace kiln::integration {
namespace {

std::string Tail(const std::string& s, size_t n = 3000) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

}  // namespace

TestRegistry::TestRegistry(std::string source_dir, std::string dir, int port)
    : source_dir_(std::move(source_dir)), dir_(std::move(dir)), port_(port) {}

TestRegistry::~TestRegistry() {
  if (started_) Stop();
}

std::string TestRegistry::host() const { return "127.0.0.1:" + std::to_string(port_); }
std::string TestRegistry::url() const { return "http://" + host(); }

std::string TestRegistry::password() const {
  std::ifstream in(dir_ + "/password");
  std::string p;
  std::getline(in, p);
  return p;
}

Status TestRegistry::Start() {
  CommandResult r = RunCommand({"bash", source_dir_ + "/scripts/registry.sh", "start", "--dir",
                                dir_, "--port", std::to_string(port_)},
                               "", std::chrono::seconds(60));
  if (!r.ok()) return Status::Unavailable("registry.sh start failed: " + Tail(r.output));
  started_ = true;
  return Status::Ok();
}

Status TestRegistry::Stop() {
  CommandResult r =
      RunCommand({"bash", source_dir_ + "/scripts/registry.sh", "stop", "--dir", dir_}, "",
                 std::chrono::seconds(30));
  started_ = false;
  if (!r.ok()) return Status::Internal("registry.sh stop failed: " + Tail(r.output));
  return Status::Ok();
}

Status TestRegistry::PushBaseImages() {
  CommandResult r = RunCommand({"bash", source_dir_ + "/scripts/base_images.sh", "--registry",
                                host(), "--authfile", auth_file()},
                               "", std::chrono::seconds(900));
  if (!r.ok()) return Status::Internal("base_images.sh failed: " + Tail(r.output));
  return Status::Ok();
}

Status TestRegistry::ManifestDigest(const std::string& reference, std::string* digest) const {
  CommandResult r =
      RunCommand({"skopeo", "inspect", "--authfile", auth_file(), "--tls-verify=false", "--no-tags",
                  "docker://" + host() + "/" + reference},
                 "", std::chrono::seconds(60));
  if (!r.ok()) return Status::NotFound(reference + ": " + Tail(r.output, 500));
  auto j = nlohmann::json::parse(r.output, nullptr, false);
  if (j.is_discarded() || !j.contains("Digest") || !j["Digest"].is_string())
    return Status::NotFound(reference + ": unexpected skopeo output");
  *digest = j["Digest"].get<std::string>();
  return Status::Ok();
}

}  // namespace kiln::integration
