// kiln: the command line. Subcommands: serve, apply, build, check-config, hash-token,
// state-check, gc.
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "actors/runtime.h"
#include "app/apply_command.h"
#include "app/composition.h"
#include "app/gc_command.h"  // issue 19
#include "app/git_hook_command.h"
#include "app/serve_command.h"
#include "app/state_check_command.h"
#include "app/worker_command.h"  // issue 20
#include "builder/layered_builder.h"
#include "common/json_text.h"
#include "common/log.h"
#include "common/names.h"
#include "common/sha256.h"
#include "config/config_parser.h"
#include "registry/registry_client.h"

namespace {

const char* kUsage = R"(usage:
  kiln serve --config FILE            run the service (HTTP: /mcp, /git/, /v1/, /healthz, /readyz,
                                      /metrics)
  kiln apply --server URL --domain D [--candidate C] [--timeout SECONDS] [--token-file F]
                                      backstop: make sure the latest successful build is deployed;
                                      token from $KILN_TOKEN or --token-file; exit 0 deployed (or
                                      already was), 2 nothing built yet, 1 failure
  kiln build --config FILE --domain D --candidate C --source DIR
                                      one build through the same scheduler, no server;
                                      JSON result on stdout, exit 1 when the build fails
  kiln worker --config FILE           run as a build worker of a scheduler's pool (issue 20):
                                      mutual TLS, the same builders as serve
  kiln check-config --config FILE     validate; every problem printed as `path: reason`
  kiln hash-token                     read a token on stdin, print its SHA-256 for the config
  kiln state-check --state-dir DIR [--builds]
                                      verify the durable state (a copy of DIR/state; safe while
                                      kiln runs): JSON on stdout, exit 0 consistent, 1 damaged
  kiln gc --dry-run --config FILE     what the storage collector would delete now (JSON; safe
                                      while kiln runs; kiln serve collects by itself)
)";

// Parses "--name value" pairs; returns false on anything else.
bool ParseFlags(int argc, char** argv, int start, std::map<std::string, std::string>* flags,
                std::string* err) {
  for (int i = start; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      *err = "unexpected argument '" + a + "'";
      return false;
    }
    auto eq = a.find('=');
    if (eq != std::string::npos) {
      (*flags)[a.substr(2, eq - 2)] = a.substr(eq + 1);
      continue;
    }
    if (i + 1 >= argc) {
      *err = "flag " + a + " needs a value";
      return false;
    }
    (*flags)[a.substr(2)] = argv[++i];
  }
  return true;
}

bool Require(const std::map<std::string, std::string>& flags,
             std::initializer_list<const char*> names, std::string* err) {
  for (const char* n : names)
    if (!flags.count(n) || flags.at(n).empty()) {
      *err = std::string("missing --") + n;
      return false;
    }
  return true;
}

std::shared_ptr<const kiln::Config> LoadOrExplain(const std::string& path) {
  auto cfg = std::make_shared<kiln::Config>();
  auto problems = kiln::LoadConfigFile(path, cfg.get());
  if (!problems.empty()) {
    std::cerr << "kiln: invalid config " << path << ":\n";
    for (const auto& p : problems) std::cerr << "  " << kiln::FormatConfigProblem(p) << "\n";
    return nullptr;
  }
  return cfg;
}

int HashToken() {
  std::string token;
  std::getline(std::cin, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) {
    std::cerr << "kiln hash-token: empty token on stdin\n";
    return 1;
  }
  std::cout << kiln::Sha256Hex(token) << "\n";
  return 0;
}

int Build(const std::map<std::string, std::string>& flags) {
  std::string err;
  if (!Require(flags, {"config", "domain", "candidate", "source"}, &err)) {
    std::cerr << "kiln build: " << err << "\n" << kUsage;
    return 2;
  }
  auto cfg = LoadOrExplain(flags.at("config"));
  if (!cfg) return 1;
  kiln::InitLogging(cfg->log_level);
  std::string domain = flags.at("domain");
  if (!cfg->domains.count(domain)) {
    std::cerr << "kiln build: domain '" << domain << "' is not in the config\n";
    return 2;
  }
  kiln::BuildRequest req;
  req.candidate = flags.at("candidate");
  kiln::Status st = kiln::ValidateName(req.candidate, "candidate");
  if (!st.ok()) {
    std::cerr << "kiln build: " << st.message() << "\n";
    return 2;
  }
  std::error_code ec;
  auto src = std::filesystem::canonical(flags.at("source"), ec);
  if (ec || !std::filesystem::is_directory(src)) {
    std::cerr << "kiln build: --source " << flags.at("source") << " is not a directory\n";
    return 2;
  }
  req.source_dir = src.string();

  // Signals: handled by a sigwait thread; children get a clean mask (the process runner resets it).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  kiln::RuntimeOptions opts;
  opts.open_repositories = false;
  opts.readiness_checks = false;
  opts.deploy = false;
  opts.persist = false;  // `kiln build` may run beside `kiln serve` on the same state_dir
  kiln::ComposeRuntime(cfg, &opts);
  std::unique_ptr<kiln::Runtime> rt;
  st = kiln::Runtime::Create(cfg, opts, &rt);
  if (!st.ok()) {
    std::cerr << "kiln build: " << st.message() << "\n";
    return 1;
  }
  kiln::Runtime* raw = rt.get();
  std::thread([set, raw] {
    int sig = 0;
    sigwait(&set, &sig);
    spdlog::warn("signal {}: cancelling the build", sig);
    raw->CancelAll();
  }).detach();
  kiln::ToolResult r = rt->BuildAndWait(domain, req);
  rt->Shutdown(std::chrono::milliseconds(0));
  std::cout << kiln::DumpJson(r.structured, 2) << std::endl;
  return r.is_error ? 1 : 0;
}

// Layered domains: the pinned base image must resolve in its registry (manifest and config).
int CheckLayeredBases(const std::string& path) {
  kiln::Config cfg;
  if (!kiln::LoadConfigFile(path, &cfg).empty()) return 1;
  int bad = 0;
  for (const auto& [name, d] : cfg.domains) {
    if (d.build.mode != "layered" || !d.build.layered) continue;
    const auto& reg = cfg.registries.at(d.image.registry);
    std::string host, repo, digest, body, type, got;
    kiln::Status st =
        kiln::LayeredBuilder::ParseBaseRef(d.build.layered->base_image, &host, &repo, &digest);
    if (st.ok()) {
      kiln::RegistryClient client(kiln::RegistryEndpoint{reg.url, reg.auth_file, reg.ca_file});
      st = client.GetManifest(repo, digest, &body, &type, &got);
    }
    if (!st.ok()) {
      std::cerr << "domains." << name
                << ".build.layered.base_image: cannot be resolved: " << st.message() << "\n";
      ++bad;
    }
  }
  if (bad == 0) std::cout << "base images resolve\n";
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (cmd == "hash-token") return HashToken();
  // Internal (not in the help): run by the pre-receive hook kiln installs (issue 15).
  if (cmd == "git-hook")
    return kiln::GitHookCommand(std::vector<std::string>(argv + 2, argv + argc), std::cin,
                                std::cerr);
  if (cmd == "state-check") {
    // --builds is the one flag without a value.
    std::vector<char*> rest{argv[0], argv[1]};
    bool list_builds = false;
    for (int i = 2; i < argc; ++i) {
      if (std::string(argv[i]) == "--builds") {
        list_builds = true;
      } else {
        rest.push_back(argv[i]);
      }
    }
    std::map<std::string, std::string> f;
    std::string e;
    if (!ParseFlags(static_cast<int>(rest.size()), rest.data(), 2, &f, &e) ||
        !Require(f, {"state-dir"}, &e)) {
      std::cerr << "kiln state-check: " << e << "\n" << kUsage;
      return 2;
    }
    return kiln::StateCheckCommand(f.at("state-dir"), list_builds, std::cout, std::cerr);
  }
  if (cmd == "gc") {  // issue 19: --dry-run is the one flag without a value
    std::vector<char*> rest{argv[0], argv[1]};
    bool dry_run = false;
    for (int i = 2; i < argc; ++i) {
      if (std::string(argv[i]) == "--dry-run") {
        dry_run = true;
      } else {
        rest.push_back(argv[i]);
      }
    }
    std::map<std::string, std::string> f;
    std::string e;
    if (!ParseFlags(static_cast<int>(rest.size()), rest.data(), 2, &f, &e)) {
      std::cerr << "kiln gc: " << e << "\n" << kUsage;
      return 2;
    }
    return kiln::GcCommand(f, dry_run, std::cout, std::cerr);
  }
  std::map<std::string, std::string> flags;
  std::string err;
  if (!ParseFlags(argc, argv, 2, &flags, &err)) {
    std::cerr << "kiln " << cmd << ": " << err << "\n" << kUsage;
    return cmd == "apply" ? 1 : 2;  // apply's 2 means "nothing built yet"
  }
  if (cmd == "check-config") {
    if (!Require(flags, {"config"}, &err)) {
      std::cerr << "kiln check-config: " << err << "\n";
      return 2;
    }
    int rc = kiln::CheckConfigCommand(flags.at("config"), std::cout, std::cerr);
    if (rc != 0) return rc;
    return CheckLayeredBases(flags.at("config"));
  }
  if (cmd == "build") return Build(flags);
  if (cmd == "apply") return kiln::ApplyCommand(flags);
  if (cmd == "worker") {  // issue 20
    if (!Require(flags, {"config"}, &err)) {
      std::cerr << "kiln worker: " << err << "\n";
      return 2;
    }
    return kiln::WorkerCommand(flags.at("config"));
  }
  if (cmd == "serve") {
    if (!Require(flags, {"config"}, &err)) {
      std::cerr << "kiln serve: " << err << "\n";
      return 2;
    }
    auto cfg = LoadOrExplain(flags.at("config"));
    if (!cfg) return 1;
    return kiln::ServeCommand(cfg, flags);
  }
  std::cerr << "kiln: unknown command '" << cmd << "'\n" << kUsage;
  return 2;
}
