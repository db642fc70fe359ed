#include "actors/runtime.h"

#include <malloc.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <filesystem>
#include <mutex>
#include <thread>

#include "actors/blocking_work.h"
#include "actors/build_history.h"
#include "actors/build_metrics.h"
#include "actors/domain_actor.h"
#include "actors/domain_env.h"
#include "actors/mcp_transport_actor.h"
#include "actors/protocol.h"
#include "actors/scheduler_actor.h"
#include "actors/state_writer.h"
#include "actors/tool_views.h"
#include "common/json_text.h"
#include "common/names.h"
#include "state/state_store.h"
#include "storage/collector.h"     // issue 19
#include "storage/lease_table.h"   // issue 19
#include "storage/state_leases.h"  // issue 19

namespace kiln {
namespace fs = std::filesystem;

namespace {

struct SystemConfig : caf::actor_system_config {
  explicit SystemConfig(size_t threads) {
    set("scheduler.max-threads", threads);
    set("logger.verbosity", caf::atom("quiet"));
    AddMessageTypes(*this);
  }
};

}  // namespace

struct Runtime::Impl {
  std::vector<std::shared_ptr<void>> keep_alive;  // destroyed last (RuntimeOptions::keep_alive)
  std::shared_ptr<const Config> config;
  std::function<Status(const RegistryConfig&)> probe_registry;
  std::function<std::string()> builder_detail;
  std::shared_ptr<Builder> builder;  // containerfile mode (or the injected builder)
  std::shared_ptr<Builder> layered;  // layered mode
  std::shared_ptr<BlockingWork> work = std::make_shared<BlockingWork>();
  std::shared_ptr<BuildMetrics> metrics = std::make_shared<BuildMetrics>();
  std::shared_ptr<kiln::BusyBranches> busy = std::make_shared<kiln::BusyBranches>();
  std::unique_ptr<SystemConfig> sys_cfg;
  std::unique_ptr<caf::actor_system> sys;
  SchedulerActor scheduler;
  std::map<std::string, DomainActor> domains;
  std::vector<std::shared_ptr<Deployer>> deployers;  // shut down after the domains
  // The one durable store: its build-key cache always, its journal when persisting.
  std::shared_ptr<StateStore> store;
  std::shared_ptr<StateWriter> writer;

  // Issue 17: MCP tool calls go through the transport actor (actors/mcp_transport_actor.h).
  mcp_transport_actor transport;
  std::atomic<uint64_t> next_handle{1};

  // Readiness, refreshed in the background.
  std::mutex ready_mu;
  nlohmann::json readiness = nlohmann::json::object();
  std::atomic<bool> stop{false};
  std::thread ready_thread;

  void RefreshReadiness();

  // --- issue 19: storage budget; the collector runs on its own thread, off the actors ---
  std::shared_ptr<StorageLeaseTable> storage_leases = std::make_shared<StorageLeaseTable>();
  std::shared_ptr<StorageGate> storage_gate = std::make_shared<StorageGate>();
  std::unique_ptr<StorageCollector> collector;  // null when not persisting (`kiln build`)
  std::thread gc_thread;
  int64_t CollectOnce();
  std::mutex gc_mu;  // one collection at a time (background thread, CollectStorageNow)
  // --- end issue 19 ---
};

int64_t Runtime::Impl::CollectOnce() {
  std::lock_guard<std::mutex> l(gc_mu);
  std::vector<std::string> names;
  for (const auto& [n, d] : config->domains) names.push_back(n);
  GcLeases leases = LeasesFromState(*store, names);
  int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  try {
    return collector->RunOnce(std::move(leases), /*dry_run=*/false, now).freed_bytes;
  } catch (const std::exception& e) {
    spdlog::error("storage: collection failed: {}", e.what());
  }
  return 0;
}

int64_t Runtime::CollectStorageNow() { return impl_->collector ? impl_->CollectOnce() : 0; }

void Runtime::Impl::RefreshReadiness() {
  nlohmann::json checks = nlohmann::json::object();
  Status b = builder->Check();
  checks["builder"] = {{"ok", b.ok()},
                       {"detail", !b.ok()          ? b.message()
                                  : builder_detail ? builder_detail()
                                                   : std::string("buildah works")}};
  for (const auto& [name, reg] : config->registries) {
    if (!probe_registry) break;
    Status st = probe_registry(reg);
    checks["registry:" + name] = {{"ok", st.ok()}, {"detail", st.ok() ? "answers" : st.message()}};
  }
  std::lock_guard<std::mutex> l(ready_mu);
  readiness = checks;
}

Runtime::Runtime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Runtime::~Runtime() {
  impl_->stop = true;
  if (impl_->ready_thread.joinable()) impl_->ready_thread.join();
  if (impl_->gc_thread.joinable()) impl_->gc_thread.join();  // issue 19
}

Status Runtime::Create(std::shared_ptr<const Config> config, RuntimeOptions opts,
                       std::unique_ptr<Runtime>* out) {
  auto impl = std::make_unique<Impl>();
  impl->work->ExportTo(std::shared_ptr<MetricsRegistry>(impl->metrics, &impl->metrics->registry()));
  if (!opts.builder)
    return Status::InvalidArgument("no builder: compose the runtime first (app/composition.h)");
  impl->keep_alive = std::move(opts.keep_alive);
  impl->config = config;
  impl->probe_registry = std::move(opts.probe_registry);
  impl->builder_detail = std::move(opts.builder_detail);
  impl->builder = opts.builder;
  impl->layered = opts.layered ? opts.layered : opts.builder;
  std::error_code ec;
  std::string state = fs::absolute(config->server.state_dir).string();
  std::string home = state + "/home";
  fs::create_directories(home, ec);
  if (ec)
    return Status::FailedPrecondition("cannot create state directory " + state + ": " +
                                      ec.message());
  fs::permissions(state, fs::perms::owner_all, fs::perm_options::replace, ec);

  StateStoreOptions so;
  so.keys_dir = state + "/keys";  // shared with `kiln build`: needs no journal lock
  // Issue 20: a build dispatched to a worker pool is carried on, not interrupted.
  so.resumable = [b = impl->builder, l = impl->layered](const BuildRecord& r) {
    std::string commit, key;
    return b->Resumable(r.id, &commit, &key) || l->Resumable(r.id, &commit, &key);
  };
  impl->store = std::make_shared<StateStore>(so);
  if (opts.persist) {
    LoadSummary sum;
    Status st = impl->store->Load(state + "/state", &sum);
    if (!st.ok())
      return Status::FailedPrecondition("state journal " + state + "/state: " + st.message());
    impl->writer = std::make_shared<StateWriter>();
    spdlog::info("state: {} build(s), {} deployed domain(s) loaded in {} ms{}", sum.builds,
                 sum.deploys, sum.load_ms,
                 sum.interrupted.empty()
                     ? ""
                     : "; " + std::to_string(sum.interrupted.size()) +
                           " build(s) were running when kiln stopped: now interrupted");
    if (!sum.resumed.empty())
      spdlog::info(
          "state: {} build(s) dispatched to workers before kiln stopped: asking their workers",
          sum.resumed.size());
    if (sum.truncated_bytes)
      spdlog::warn("state: a torn last record ({} bytes, a write cut short by a crash) was dropped",
                   sum.truncated_bytes);
    for (const auto& id : sum.duplicate_terminal)
      spdlog::error("state: build {} has a second terminal record (ignored: the first one wins)",
                    id);
    for (const auto& c : sum.corruptions) spdlog::error("state: {}", c);
    for (const auto& n : sum.notes) spdlog::info("state: {}", n);
  }
  // Issue 19, memory that levels off: build logs and records are allocated on the worker
  // threads and freed on others; with glibc's default of 8 arenas per core each thread's arena
  // kept its own free fragments (RSS grew from ~210 to ~340 MiB over a soak with flat live
  // data). Few arenas, and their free pages returned below (MemoryUpkeep).
  mallopt(M_ARENA_MAX, 4);
  impl->sys_cfg = std::make_unique<SystemConfig>(opts.worker_threads);
  impl->sys = std::make_unique<caf::actor_system>(*impl->sys_cfg);
  std::map<std::string, int> weights;
  std::map<std::string, size_t> slots;  // per-domain build slots (issue 15)
  for (const auto& [name, d] : config->domains) {
    weights[name] = d.weight;
    slots[name] = static_cast<size_t>(DomainBuildSlots(*config, d));
  }
  impl->scheduler = SpawnScheduler(*impl->sys, config->scheduler.max_parallel_builds, weights,
                                   impl->metrics, impl->store->BuildKeys(), slots);

  for (const auto& [name, d] : config->domains) {
    auto env = std::make_shared<DomainEnv>();
    env->config = config;
    env->domain = name;
    env->dc = &d;
    auto reg = config->registries.find(d.image.registry);
    if (reg == config->registries.end())
      return Status::InvalidArgument("domain " + name + ": unknown registry " + d.image.registry);
    env->registry = &reg->second;
    env->domain_dir = state + "/domains/" + name;
    env->home_dir = home;
    env->builder = d.build.mode == "layered" ? impl->layered : impl->builder;
    env->work = impl->work;
    env->metrics = impl->metrics;
    env->busy = impl->busy;
    if (opts.persist) {  // issue 19: budgets apply to served domains, not to `kiln build`
      env->storage_leases = impl->storage_leases;
      env->storage_gate = impl->storage_gate;
    }
    if (opts.deployers.count(name))
      env->deployer = opts.deployers.at(name);
    else if (opts.deploy && opts.make_deployer)
      env->deployer = opts.make_deployer(name, d, reg->second, env->domain_dir);
    if (env->deployer) impl->deployers.push_back(env->deployer);
    env->store = impl->store;
    env->writer = impl->writer;
    if (opts.persist)
      for (const auto& c : impl->store->Candidates(name))
        if (ValidateName(c, "candidate").ok()) env->known_candidates.push_back(c);
    env->log_max_bytes = config->scheduler.build_log_max_bytes;
    env->max_candidates = static_cast<size_t>(d.max_candidates);
    env->history =
        std::make_shared<DomainHistoryBudget>(env->history_per_candidate, kDefaultHistoryPerDomain);
    fs::create_directories(env->domain_dir + "/cache", ec);
    fs::create_directories(env->domain_dir + "/candidates", ec);
    if (ec)
      return Status::FailedPrecondition("cannot create " + env->domain_dir + ": " + ec.message());
    if (opts.open_repositories) {
      std::unique_ptr<GitRepo> repo;
      Status st = GitRepo::Open(env->domain_dir + "/repo.git", &repo);
      if (!st.ok()) return Status::FailedPrecondition("domain " + name + ": " + st.message());
      repo->set_tree_limits(TreeLimitsFromConfig(d.push));  // issue 15: checkouts stay bounded
      env->repo = std::move(repo);
    }
    impl->domains[name] = SpawnDomain(*impl->sys, env, impl->scheduler);
  }
  // Issue 17: one MCP transport actor for the endpoint; deadlines from each domain's config.
  std::map<std::string, CallTimeouts> timeouts;
  for (const auto& [name, d] : config->domains) {
    CallTimeouts t;
    t.build = BuildCallTimeout(d);  // actors/protocol.h: the one policy for both callers
    t.deploy = DeployCallTimeout(d);
    t.cancel_on_disconnect = d.build.cancel_on_disconnect;
    timeouts[name] = t;
  }
  std::map<std::string, caf::actor> domain_handles;  // the transport sends untyped (same messages)
  for (const auto& [name, d] : impl->domains) domain_handles[name] = caf::actor_cast<caf::actor>(d);
  impl->transport = SpawnMcpTransport(*impl->sys, std::move(domain_handles), std::move(timeouts));
  Impl* raw = impl.get();
  impl->readiness = {{"builder", {{"ok", false}, {"detail", "first check pending"}}}};
  if (opts.readiness_checks)
    impl->ready_thread = std::thread([raw] {
      int ticks = 0;
      raw->RefreshReadiness();
      while (!raw->stop) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        if (++ticks % 50 == 0) raw->RefreshReadiness();  // every 10 s
      }
    });
  // Issue 19: the storage collector, at start and every storage.gc_interval_s.
  if (opts.persist) {
    impl->collector =
        std::make_unique<StorageCollector>(config, state, impl->storage_leases, impl->storage_gate);
    impl->gc_thread = std::thread([raw] {
      // Every gc_interval_s, and at most every 10 s while a domain's builds are refused for
      // its budget (the builds holding the space may have ended). Issue 19: with a budget, also
      // at most every 2 s after a build wrote its outputs (the budget holds at every moment).
      const int ticks_per_run = raw->config->storage.gc_interval_s * 5;
      bool budgeted = raw->config->storage.max_gb > 0;
      for (const auto& [n, d] : raw->config->domains) budgeted |= d.storage.max_gb > 0;
      int since = 0;
      for (int ticks = 0; !raw->stop; ++ticks, ++since) {
        // Issue 19: the free pages of every malloc arena back to the system every 30 s.
        if (ticks % 150 == 75) malloc_trim(0);
        if (ticks % ticks_per_run == 0 ||
            (since >= 50 && raw->storage_gate->TakeCollectionWanted()) ||
            (budgeted && since >= 10 && raw->storage_gate->TakeBuildEnded())) {
          raw->CollectOnce();
          since = 0;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
    });
  }
  out->reset(new Runtime(std::move(impl)));
  return Status::Ok();
}

uint64_t Runtime::Call(ToolCall call, ProgressFn progress, DoneFn done) {
  // Issue 17: the transport actor owns the call from here (deadline, cancellation, answer).
  uint64_t handle = impl_->next_handle.fetch_add(1);
  caf::anon_send(impl_->transport, mcp_call_atom::value, handle, std::move(call),
                 McpCallCallbacks{std::move(progress), std::move(done)});
  return handle;
}

void Runtime::Cancel(uint64_t handle) {
  caf::anon_send(impl_->transport, cancel_atom::value, handle);
}

void Runtime::Disconnected(uint64_t handle) {
  caf::anon_send(impl_->transport, disconnect_atom::value, handle);
}

std::shared_ptr<McpSessionHost> Runtime::ServeMcpSessions(McpOptions options) {
  return kiln::ServeMcpSessions(*impl_->sys, impl_->transport, std::move(options));
}

nlohmann::json Runtime::Readiness() {
  std::lock_guard<std::mutex> l(impl_->ready_mu);
  return impl_->readiness;
}

std::string Runtime::MetricsText() {
  std::string text = impl_->metrics->Render();
  if (impl_->collector) text += impl_->collector->RenderMetrics();  // issue 19
  return text;
}

ToolResult Runtime::BuildAndWait(const std::string& domain, const BuildRequest& req) {
  auto dom = impl_->domains.find(domain);
  if (dom == impl_->domains.end()) return {ErrorJson("unknown domain '" + domain + "'"), true};
  caf::scoped_actor self{*impl_->sys};
  ToolResult out{ErrorJson("no result"), true};
  self->request(dom->second, BuildCallTimeout(impl_->config->domains.at(domain)), build_atom::value,
                req, caf::actor{})
      .receive([&](ToolResult& r) { out = std::move(r); },
               [&](caf::error& e) {
                 out = {ErrorJson("internal error: " + caf::to_string(e)), true};
               });
  return out;
}

std::set<std::string> Runtime::BusyBranches(const std::string& domain) const {
  return impl_->busy->Get(domain);
}

void Runtime::Pushed(const std::string& domain) { impl_->busy->Pushed(domain); }

void Runtime::PushedRefs(const std::string& domain, std::vector<PushedRef> refs) {
  auto dom = impl_->domains.find(domain);
  if (dom == impl_->domains.end() || refs.empty()) return;
  caf::anon_send(dom->second, pushed_atom::value, std::move(refs));
}

void Runtime::CancelAll() {
  for (auto& [n, d] : impl_->domains) caf::anon_send(d, shutdown_atom::value);
}

void Runtime::Shutdown(std::chrono::milliseconds grace) {
  Impl* impl = impl_.get();
  if (!impl->sys) return;
  auto deadline = std::chrono::steady_clock::now() + grace;
  SchedulerStats st;
  {
    caf::scoped_actor self{*impl->sys};
    while (true) {
      self->request(impl->scheduler, std::chrono::seconds(5), stats_atom::value)
          .receive([&](SchedulerStats& s) { st = s; }, [&](caf::error&) {});
      if (st.running + st.queued == 0 || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  if (st.running + st.queued > 0) {
    spdlog::warn("shutdown: grace period over; cancelling {} running and {} queued build(s)",
                 st.running, st.queued);
  } else {
    spdlog::info("shutdown: no builds running");
  }
  for (auto& [n, d] : impl->domains) caf::anon_send(d, shutdown_atom::value);
  if (!impl->work->Wait(std::chrono::seconds(10)))
    spdlog::error("shutdown: builder processes still running after 10 s");
  for (auto& d : impl->deployers) d->Shutdown();  // local candidates stop with kiln
  impl->stop = true;
  if (impl->ready_thread.joinable()) impl->ready_thread.join();
  if (impl->gc_thread.joinable()) impl->gc_thread.join();  // issue 19
  for (auto& [n, d] : impl->domains) caf::anon_send_exit(d, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(impl->scheduler, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(impl->transport, caf::exit_reason::user_shutdown);  // answers what is left
  impl->domains.clear();
  impl->scheduler = nullptr;
  impl->transport = nullptr;
  impl->sys.reset();
  if (impl->writer) impl->writer->Drain();  // every journal write the actors posted is on disk
}

}  // namespace kiln
