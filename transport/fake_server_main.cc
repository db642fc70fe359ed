// kiln_fake_mcp_server: serves kiln's MCP transport over a FakeToolBackend, for the MCP
// conformance suite and SDK smoke tests. Hard-coded config: domain "demo", token "demo-token",
// alias build_demo -> build_candidate. Usage: kiln_fake_mcp_server [--listen 127.0.0.1:PORT]
// Prints "listening on <port>" once ready; stops on SIGINT/SIGTERM.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/sha256.h"
#include "config/config.h"
#include "transport/fake_tool_backend.h"
#include "transport/http_server.h"

int main(int argc, char** argv) {
  std::string listen = "127.0.0.1:8711";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--listen") == 0) listen = argv[++i];
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before any thread starts

  kiln::Config config;
  config.server.listen = listen;
  kiln::DomainConfig demo;
  demo.name = "demo";
  demo.token_sha256 = {kiln::Sha256Hex("demo-token")};
  demo.tool_aliases = {{"build_demo", "build_candidate"}};
  config.domains["demo"] = demo;

  kiln::FakeToolBackend::Options fake_options;
  fake_options.build_duration = std::chrono::milliseconds(1500);
  fake_options.progress_interval = std::chrono::milliseconds(250);
  kiln::FakeToolBackend backend(fake_options);
  kiln::HttpServer server(config, backend);
  kiln::Status s = server.Start();
  if (!s.ok()) {
    std::fprintf(stderr, "kiln_fake_mcp_server: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("listening on %u\n", server.port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  server.Stop();
  return 0;
}
