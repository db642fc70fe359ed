// kiln's configuration as plain structs (shape documented in docs/configuration.md).
// Parsed and validated by config/config_parser.h. Immutable after load; safe to share
// read-only between threads. After LoadConfigFile, the file paths (state_dir, auth_file,
// ca_file, kubeconfig) are absolute: relative ones were resolved against the config file's
// directory.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

struct ServerConfig {
  std::string listen = "127.0.0.1:8700";  // host:port
  std::string state_dir;                  // required
  std::vector<std::string> allowed_origins;
  int64_t max_request_bytes = 1 << 20;  // 1 KiB..1 GiB; larger HTTP request bodies are refused
  int max_sessions = 256;               // 1..100000 concurrent MCP sessions
  int max_inflight_per_session = 32;    // 1..1024 concurrent requests in one MCP session
  // --- HTTP transport caps (issue 15; docs/security.md "Limits of the HTTP transport") ---
  int max_connections = 1024;        // 1..1000000 open connections; more get 503
  int idle_timeout_s = 60;           // 1..3600: keep-alive connection idle between requests
  int header_timeout_s = 10;         // 1..600: a request's headers must arrive within this
  int write_timeout_s = 30;          // 1..3600: a client that stops reading is disconnected
  int max_sessions_per_domain = 64;  // 0..100000 MCP sessions per domain (0: only max_sessions)
  int git_slots = 32;                // 1..1024 git CGI processes at once (all domains)
  int git_slots_per_domain = 4;      // 1..1024 git CGI processes at once for one domain
  /// Where /metrics is served without a token ("host:port"); "" or "off": nowhere (then only
  /// the operator token reads it, on the main port).
  std::string metrics_listen = "127.0.0.1:8701";
  // --- end HTTP transport caps ---
};

struct SchedulerConfig {
  int max_parallel_builds = 2;            // 1..64
  int64_t build_log_max_bytes = 4 << 20;  // 4 KiB..1 GiB kept per build log
};

struct RegistryConfig {
  std::string name;
  std::string url;                       // http://host:port or https://host:port
  std::optional<std::string> auth_file;  // docker config.json; never logged
  std::optional<std::string> ca_file;
};

struct ContainerfileBuild {
  std::string file = "Containerfile";  // relative to the source root
  std::string context = ".";           // relative to the source root
  std::optional<std::string> target;
  std::map<std::string, std::string> build_args;
  bool network = false;  // RUN steps may use the network (opt-in); kept equal to
                         // BuildConfig::network == "host" by the parser (older spelling)
};

struct LayeredOutput {
  std::string from;  // relative to the workspace
  std::string to;    // absolute path in the image
};

struct LayeredBuild {
  std::string base_image;  // "<registry>/<repo>@sha256:<digest>"
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  std::map<std::string, std::string> caches;  // env var -> cache name
  std::vector<LayeredOutput> outputs;
  std::vector<std::string> entrypoint;
};

struct BuildConfig {
  std::string mode = "containerfile";  // "containerfile" | "layered"
  int timeout_s = 600;                 // 1..86400
  /// "none": build steps run in a network namespace with loopback only (default).
  /// "host": build steps share the host network (opt-in; check-config warns loudly).
  std::string network = "none";
  /// The unprivileged system user containerfile builds run as (never root, never kiln's uid;
  /// needs /etc/subuid and /etc/subgid ranges). Created by scripts/setup.sh.
  std::string user = "kiln-build";
  /// Largest file a build step may write, in MiB (RLIMIT_FSIZE): 1..1048576.
  int64_t max_file_mb = 8192;
  ContainerfileBuild containerfile;
  std::optional<LayeredBuild> layered;
};

struct ImageConfig {
  std::string registry;    // key into Config::registries
  std::string repository;  // e.g. "loop/app"
};

struct KubernetesDeploy {
  std::string namespace_;
  std::string deployment;
  std::string container;
  std::optional<std::string> kubeconfig;  // null: in-cluster
  int rollout_timeout_s = 300;
};

struct LocalDeploy {
  int port = 9000;
  std::string health_path = "/healthz";
};

struct DeployConfig {
  std::string type = "none";  // "kubernetes" | "local" | "none"
  std::optional<KubernetesDeploy> kubernetes;
  std::optional<LocalDeploy> local;
};

struct DomainConfig {
  std::string name;
  std::vector<std::string> token_sha256;            // lowercase hex
  int weight = 1;                                   // 1..1000
  int max_candidates = 256;                         // 1..10000 candidates the agent may create
  std::map<std::string, std::string> tool_aliases;  // alias -> tool name
  BuildConfig build;
  ImageConfig image;
  DeployConfig deploy;
};

struct Config {
  std::string log_level = "info";  // trace | debug | info | warn | error
  ServerConfig server;
  SchedulerConfig scheduler;
  std::map<std::string, RegistryConfig> registries;
  std::vector<std::string> operator_token_sha256;
  std::map<std::string, DomainConfig> domains;
};

}  // namespace kiln
