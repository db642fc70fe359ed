// kiln's configuration as plain structs (shape documented in docs/configuration.md).
// Parsed and validated by config/config_parser.h. Immutable after load; safe to share
// read-only between threads. After LoadConfigFile, the file paths (state_dir, auth_file,
// ca_file, kubeconfig) are absolute: relative ones were resolved against the config file's
// directory.
#pragma once

#include <algorithm>
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
  // --- Issue 16: the URL agents reach kiln at (git remote, MCP) ---
  /// "http(s)://host[:port][/prefix]" without a trailing '/'; default "http://" + listen.
  /// Tool messages and the server instructions give `<public_url>/git/<domain>.git`.
  std::string public_url;
  // --- end issue 16 ---
};

// --- Issue 16 ---
/// The git remote of a domain as the agent pushes to it: "<public_url>/git/<domain>.git".
inline std::string GitRemoteUrl(const ServerConfig& s, const std::string& domain) {
  return (s.public_url.empty() ? "http://" + s.listen : s.public_url) + "/git/" + domain + ".git";
}
// --- end issue 16 ---

struct SchedulerConfig {
  int max_parallel_builds = 2;            // 1..64
  int64_t build_log_max_bytes = 4 << 20;  // 4 KiB..1 GiB kept per build log
  // Issue 20: a static worker pool for bare machines, "host:port" each (IPv6 "[addr]:port").
  // Empty (the default): no pool, every build runs on this node exactly as before.
  std::vector<std::string> workers;
  // Issue 20: the scheduler's side of the pool's mutual TLS (required with `workers`): its
  // certificate and key, and the CA whose certificates it accepts from workers.
  std::string worker_tls_certificate, worker_tls_key, worker_tls_ca;
  // Issue 20: SHA-256 of the workers' read credential for /git/<domain>.git (upload-pack of
  // any domain, never receive-pack, never /mcp). Empty: workers cannot fetch.
  std::vector<std::string> worker_token_sha256;
  // Issue 20: the pool from a worker Service's EndpointSlices instead of a static list
  // (`worker_service`): the Service's name ("" = none), its namespace ("" = the service
  // account's), the EndpointSlice port name, and a kubeconfig file (none: in-cluster).
  std::string worker_service, worker_service_namespace;
  std::string worker_service_port_name = "kiln-worker";
  std::optional<std::string> worker_service_kubeconfig;
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
  /// Issue 18: buildah's step cache (`--layers`): "auto" (only when some step can be reused,
  /// builder/step_cache_policy.h), "always" or "never".
  std::string step_cache = "auto";
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

// --- Issue 15: sandboxes with limits (build.limits, deploy.local.limits) ---
/// RLIMITs of a sandbox's processes.
struct SandboxLimitsConfig {
  /// RLIMIT_NPROC: processes of the sandbox's host user at once: 1..1048576.
  int64_t max_processes = 512;
  /// RLIMIT_AS: address space of each process, in MiB: 16..1048576.
  int64_t max_memory_mb = 4096;
};
// --- end Issue 15 ---

struct BuildConfig {
  std::string mode = "containerfile";  // "containerfile" | "layered"
  int timeout_s = 600;                 // 1..86400
  /// "none": build steps run in a network namespace with loopback only (default).
  /// "host": build steps share the host network (opt-in; check-config warns loudly).
  std::string network = "none";
  /// Issue 18: how new layers are compressed. "auto" (default): "none" when the domain's
  /// registry is on the loopback (no network to save bytes on), "gzip" otherwise. "gzip":
  /// level 1. "none": layered mode stores the plain tar (media type ...layer.v1.tar, digest =
  /// diff_id); containerfile mode exports gzip level 0 (stored: no compression pass).
  std::string compression = "auto";
  /// The unprivileged system user containerfile builds run as (never root, never kiln's uid;
  /// needs /etc/subuid and /etc/subgid ranges). Created by scripts/setup.sh.
  std::string user = "kiln-build";
  /// Largest file a build step may write, in MiB (RLIMIT_FSIZE): 1..1048576.
  int64_t max_file_mb = 8192;
  // --- issue 15: base images by policy (config/base_image_policy.h) ---
  /// Repository patterns on the domain's registry its containerfile builds may use as base
  /// images (FROM, COPY --from, RUN --mount from=). Absent: any repository on the registry
  /// except other domains' image repositories. The domain's own repository is always allowed.
  std::optional<std::vector<std::string>> base_images;
  // --- end issue 15 ---
  /// Issue 15: limits of the layered build sandbox (with max_file_mb).
  SandboxLimitsConfig limits;
  ContainerfileBuild containerfile;
  std::optional<LayeredBuild> layered;
  // --- issue 18: build on push ---
  /// A push to refs/heads/<candidate> starts that candidate's build at once (a following
  /// build_candidate joins it). false: nothing is built until build_candidate is called.
  bool on_push = true;
  // --- end issue 18 ---
  /// Issue 17: an MCP 2026-07-28 request whose stream the client closes while its build runs
  /// cancels that build when no other call of this kiln waits for it. false (default): the
  /// build keeps running for a later identical call to join.
  bool cancel_on_disconnect = false;
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
  // --- Issue 16: Kubernetes deploy failures say why ---
  /// A new pod that runs but stays unready (readiness probe failing) or stays unschedulable
  /// this long fails the deploy (deploy_unready / deploy_unschedulable) before the rollout
  /// timeout. 1..86400; the rollout timeout still applies when it is shorter.
  int unready_timeout_s = 60;
  // --- end Issue 16 ---
};

struct LocalDeploy {
  int port = 9000;
  std::string health_path = "/healthz";
  // --- Issue 15: sandboxes with limits ---
  /// Unprivileged host user the candidate's sandbox runs as (never root).
  std::string user = "kiln-build";
  /// Bound on the extracted image's file data, in MiB: 1..1048576.
  int64_t max_rootfs_mb = 2048;
  /// Largest file the candidate may write, in MiB (RLIMIT_FSIZE): 1..1048576.
  int64_t max_file_mb = 8192;
  SandboxLimitsConfig limits;
  // --- end Issue 15 ---
};

struct DeployConfig {
  std::string type = "none";  // "kubernetes" | "local" | "none"
  std::optional<KubernetesDeploy> kubernetes;
  std::optional<LocalDeploy> local;
  /// Issue 16: sections present for another deploy type ("kubernetes", "local"): not
  /// validated, not used; check-config warns.
  std::vector<std::string> ignored_sections{};
};

// --- Issue 15: bounded pushes and checkouts (git bomb) -------------------------------------
/// What one push may write and what a checked-out tree may expand to. `Config::push` is the
/// global default (top-level "push"); each domain starts from it and may override any key
/// (`domains.<d>.push`). Enforced by the pre-receive hook and again before every checkout
/// (workspace/tree_limits.h).
struct PushLimitsConfig {
  int64_t max_tree_bytes = int64_t{512} << 20;  // 1 KiB..1 TiB: sum of file sizes when checked out
  int64_t max_files = 100000;                   // 1..10000000 files and directories in a tree
  int64_t max_file_bytes = int64_t{64} << 20;   // 1 KiB..64 GiB: largest single file
  int64_t max_refs_per_push = 64;               // 1..10000 ref updates in one push
};
// --- end issue 15 ------------------------------------------------------------------------

// --- Issue 19: storage budget and collection (storage/gc_policy.h, docs/operations.md) ---
/// Top-level "storage": the global budget and the collector's schedule.
struct StorageConfig {
  /// Budget for everything kiln keeps in server.state_dir, in GB (GiB, fractions allowed):
  /// 0..1000000; 0: no global budget (age rules still apply).
  double max_gb = 0;
  /// Seconds between collections (also run once at start): 10..86400.
  int gc_interval_s = 300;
  /// A candidate without a build request this long is idle; its things go first: 0..31536000.
  int64_t candidate_idle_s = 6 * 3600;
  /// Workspaces of candidates idle this long are removed even under budget: 0 (never)..31536000.
  int64_t workspace_idle_s = 24 * 3600;
  /// Collection starts at the budget less this share and collects down to it, so that what
  /// builds write until the next collection stays under the budget: 0..90 (%).
  int headroom_pct = 20;
};
/// "domains.<d>.storage": the domain's own budget.
struct DomainStorageConfig {
  /// GB (GiB, fractions allowed) the domain's things may take: 0..1000000; 0: none.
  double max_gb = 0;
};
// --- end issue 19 ---

struct DomainConfig {
  std::string name;
  std::vector<std::string> token_sha256;            // lowercase hex
  int weight = 1;                                   // 1..1000
  int max_candidates = 256;                         // 1..10000 candidates the agent may create
  std::map<std::string, std::string> tool_aliases;  // alias -> tool name
  BuildConfig build;
  ImageConfig image;
  DeployConfig deploy;
  PushLimitsConfig push;  // issue 15: starts as Config::push, overridden by domains.<d>.push
  // --- per-domain build slots (issue 15) ---
  // Builds of this domain running at once, 1..64 (above scheduler.max_parallel_builds it is
  // refused). Unset: see DomainBuildSlots().
  std::optional<int> max_parallel_builds;
  // --- end per-domain build slots ---
  DomainStorageConfig storage;  // issue 19: domains.<d>.storage
};

struct Config {
  std::string log_level = "info";  // trace | debug | info | warn | error
  ServerConfig server;
  SchedulerConfig scheduler;
  std::map<std::string, RegistryConfig> registries;
  std::vector<std::string> operator_token_sha256;
  std::map<std::string, DomainConfig> domains;
  PushLimitsConfig push;  // issue 15: the default of every domain's push limits
  StorageConfig storage;  // issue 19: top-level "storage"
};

// --- per-domain build slots (issue 15) ---
/// The build slots domain `d` may hold at once: its `max_parallel_builds` when set; otherwise
/// the global `scheduler.max_parallel_builds` when it is the only domain, and half of it
/// (rounded up) when several domains share kiln, so that one domain's hung builds can never
/// hold every slot until their timeout.
inline int DomainBuildSlots(const Config& c, const DomainConfig& d) {
  int global = c.scheduler.max_parallel_builds;
  if (d.max_parallel_builds) return std::min(*d.max_parallel_builds, global);
  return c.domains.size() <= 1 ? global : (global + 1) / 2;
}
// --- end per-domain build slots ---

}  // namespace kiln
