#include "app/serve_command.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <chrono>
#include <iostream>
#include <memory>

#include "actors/runtime.h"
#include "app/composition.h"
#include "app/git_hook_command.h"
#include "common/log.h"
#include "config/config_parser.h"
#include "transport/git_http.h"
#include "transport/http_server.h"
#include "transport/operator_api.h"

namespace kiln {

int ServeCommand(std::shared_ptr<const Config> config,
                 const std::map<std::string, std::string>& flags) {
  InitLogging(config->log_level);
  for (const auto& w : CollectConfigWarnings(*config))
    spdlog::warn("config: {}", FormatConfigProblem(w));
  // Connections, git processes, build pipes and journal files all take descriptors: use the
  // whole hard limit rather than a shell's soft default of 1024.
  struct rlimit nofile;
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &nofile) != 0) spdlog::warn("cannot raise the descriptor limit");
  }
  int grace_s = 30;
  if (flags.count("grace")) {
    try {
      grace_s = std::stoi(flags.at("grace"));
    } catch (...) {
      std::cerr << "kiln serve: --grace must be a number of seconds\n";
      return 2;
    }
  }
  // Block the termination signals in every thread; a sigwait below receives them. Children get
  // a clean mask from the process runner.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  std::unique_ptr<Runtime> rt;
  RuntimeOptions ropts;
  ComposeRuntime(config, &ropts);  // issue 14: the composition root decides the implementations
  Status st = Runtime::Create(config, std::move(ropts), &rt);
  if (!st.ok()) {
    spdlog::error("cannot start: {}", st.message());
    return 1;
  }
  HttpServerOptions opts;
  opts.max_request_bytes = static_cast<size_t>(config->server.max_request_bytes);
  opts.max_sessions = static_cast<size_t>(config->server.max_sessions);
  opts.max_calls_per_session = static_cast<size_t>(config->server.max_inflight_per_session);
  opts.catalog.include_deploy = true;
  // HTTP transport caps (issue 15).
  opts.max_connections = static_cast<size_t>(config->server.max_connections);
  opts.idle_timeout = std::chrono::seconds(config->server.idle_timeout_s);
  opts.header_timeout = std::chrono::seconds(config->server.header_timeout_s);
  opts.write_timeout = std::chrono::seconds(config->server.write_timeout_s);
  opts.max_sessions_per_domain = static_cast<size_t>(config->server.max_sessions_per_domain);
  // Issue 17: the MCP transport actor owns the session table.
  Runtime* rt_raw = rt.get();
  opts.session_host = [rt_raw](McpOptions o) { return rt_raw->ServeMcpSessions(std::move(o)); };
  // The git endpoint outlives the server's Stop (declared first); the runtime outlives both.
  GitHttpHandler::Options gopts;
  gopts.state_dir = config->server.state_dir;
  gopts.hook_exe = SelfExecutable();  // issue 15: the hook runs `kiln git-hook pre-receive`
  gopts.max_concurrent = static_cast<size_t>(config->server.git_slots);
  gopts.max_concurrent_per_domain = static_cast<size_t>(config->server.git_slots_per_domain);
  gopts.write_stall_timeout = std::chrono::seconds(config->server.write_timeout_s);
  Runtime* raw = rt.get();
  gopts.busy_branches = [raw](const std::string& domain) { return raw->BusyBranches(domain); };
  gopts.pushed = [raw](const std::string& domain) { raw->Pushed(domain); };
  // Issue 18: build on push (domains.<d>.build.on_push decides in the domain actor).
  gopts.refs_updated = [raw](const std::string& domain,
                             const std::vector<std::pair<std::string, std::string>>& refs) {
    std::vector<PushedRef> pushed;
    for (const auto& [ref, commit] : refs) pushed.push_back({ref, commit});
    raw->PushedRefs(domain, std::move(pushed));
  };
  GitHttpHandler git(*config, gopts);
  HttpServer server(*config, *rt, opts);
  git.Register(server);
  OperatorApi operator_api(*config, *rt);
  operator_api.Register(server);
  st = server.Start();
  if (!st.ok()) {
    spdlog::error("cannot listen on {}: {}", config->server.listen, st.message());
    rt->Shutdown(std::chrono::milliseconds(0));
    return 1;
  }
  // /metrics names every domain: served without a token only on the operator's listener.
  std::unique_ptr<HttpServer> metrics_server;
  if (!config->server.metrics_listen.empty()) {
    HttpServerOptions mopts;
    mopts.listen = config->server.metrics_listen;
    mopts.io_threads = 1;
    mopts.metrics_only = true;
    mopts.max_connections = 64;
    HttpServer* main_server = &server;
    mopts.metrics_text = [main_server] { return main_server->MetricsText(); };
    metrics_server = std::make_unique<HttpServer>(*config, *rt, mopts);
    st = metrics_server->Start();
    if (!st.ok()) {
      // Not fatal: the agents' service goes on; the operator token still reads /metrics there.
      spdlog::error(
          "metrics listener not started on {} (server.metrics_listen): {}; /metrics stays "
          "available on the main port with the operator token",
          config->server.metrics_listen, st.message());
      metrics_server.reset();
    } else {
      spdlog::info("metrics on {} (port {})", config->server.metrics_listen,
                   metrics_server->port());
    }
  }
  spdlog::info("kiln serving on {} (port {}), {} domain(s), state in {}", config->server.listen,
               server.port(), config->domains.size(), config->server.state_dir);
  int sig = 0;
  sigwait(&set, &sig);
  spdlog::info("signal {}: stopping; running builds get {} s to finish", sig, grace_s);
  if (metrics_server) metrics_server->Stop();
  server.Stop();
  rt->Shutdown(std::chrono::seconds(grace_s));
  spdlog::info("stopped");
  return 0;
}

}  // namespace kiln
