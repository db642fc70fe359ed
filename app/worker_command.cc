#include "app/worker_command.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <chrono>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include "actors/blocking_work.h"
#include "actors/runtime.h"
#include "app/composition.h"
#include "common/file_util.h"
#include "common/log.h"
#include "common/names.h"
#include "core/cancel_token.h"
#include "pool/build_wire.h"
#include "pool/worker_admission.h"
#include "registry/registry_client.h"
#include "workspace/checkout.h"
#include "workspace/git_repo.h"
#include "workspace/git_runner.h"

namespace kiln {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

std::string Resolve(const std::string& base, const std::string& p) {
  if (p.empty() || p[0] == '/') return p;
  return (fs::path(base) / p).lexically_normal().string();
}

bool Readable(const std::string& f) {
  std::ifstream in(f);
  return in.good() && fs::is_regular_file(f);
}

// A 64-hex stand-in for the token hash a domain entry needs to pass the parser; it matches no
// token (the worker authenticates no agent).
std::string PlaceholderHash() { return std::string(64, '0'); }

}  // namespace

std::vector<ConfigProblem> LoadWorkerConfig(const std::string& path, WorkerSettings* w,
                                            Config* site, json* raw) {
  std::vector<ConfigProblem> problems;
  std::ifstream in(path);
  if (!in) return {{"", "cannot read " + path}};
  std::stringstream ss;
  ss << in.rdbuf();
  json doc = json::parse(ss.str(), nullptr, false);
  if (!doc.is_object()) return {{"", "not a JSON object: " + path}};
  const std::string base = fs::absolute(path).parent_path().string();
  w->config_dir = base;
  auto bad = [&](const std::string& p, const std::string& why) { problems.push_back({p, why}); };
  auto it = doc.find("worker");
  if (it == doc.end() || !it->is_object()) {
    bad("worker", "missing required section (listen, slots, tls, git_token_file)");
  } else {
    const json& wk = *it;
    for (auto k = wk.begin(); k != wk.end(); ++k) {
      static const std::set<std::string> known = {
          "name",           "listen",    "slots",          "tls",
          "git_token_file", "port_file", "max_candidates", "max_candidates_per_domain"};
      if (!known.count(k.key())) bad("worker." + k.key(), "unknown key");
    }
    auto str = [&](const json& o, const char* k, const std::string& p, bool required,
                   std::string* out) {
      auto f = o.find(k);
      if (f == o.end()) {
        if (required) bad(p, "missing required key");
        return false;
      }
      if (!f->is_string() || f->get<std::string>().empty()) {
        bad(p, "must be a non-empty string");
        return false;
      }
      *out = f->get<std::string>();
      return true;
    };
    std::string listen;
    if (str(wk, "listen", "worker.listen", true, &listen)) {
      std::string why = ParseWorkerAddress(listen, &w->listen_host, &w->listen_port);
      // Port 0 (any free port, see port_file) is allowed here.
      if (!why.empty() && listen.size() > 2 && listen.substr(listen.size() - 2) == ":0") {
        w->listen_host = listen.substr(0, listen.size() - 2);
        w->listen_port = 0;
        why.clear();
      }
      if (!why.empty()) bad("worker.listen", "\"" + listen + "\" " + why);
    }
    w->name = listen;
    str(wk, "name", "worker.name", false, &w->name);
    if (wk.contains("slots")) {
      if (!wk["slots"].is_number_integer() || wk["slots"].get<int64_t>() < 1 ||
          wk["slots"].get<int64_t>() > 256) {
        bad("worker.slots", "must be an integer 1..256 (builds at once on this worker)");
      } else {
        w->slots = wk["slots"].get<int>();
      }
    }
    for (auto [key, out] :
         {std::pair<const char*, size_t*>{"max_candidates", &w->retention.max_candidates},
          {"max_candidates_per_domain", &w->retention.max_candidates_per_domain}}) {
      if (!wk.contains(key)) continue;
      if (!wk[key].is_number_integer() || wk[key].get<int64_t>() < 1 ||
          wk[key].get<int64_t>() > 100000) {
        bad(std::string("worker.") + key,
            "must be an integer 1..100000 (candidates whose repository, workspace and build "
            "storage the worker keeps)");
      } else {
        *out = wk[key].get<size_t>();
      }
    }
    auto file = [&](const json& o, const char* k, const std::string& p, std::string* out) {
      if (!str(o, k, p, true, out)) return;
      *out = Resolve(base, *out);
      if (!Readable(*out)) bad(p, "cannot read " + *out);
    };
    auto tls = wk.find("tls");
    if (tls == wk.end() || !tls->is_object()) {
      bad("worker.tls",
          "missing required section {certificate, key, scheduler_ca} (mutual TLS: the worker "
          "accepts only certificates signed by scheduler_ca)");
    } else {
      for (auto k = tls->begin(); k != tls->end(); ++k)
        if (k.key() != "certificate" && k.key() != "key" && k.key() != "scheduler_ca")
          bad("worker.tls." + k.key(), "unknown key");
      file(*tls, "certificate", "worker.tls.certificate", &w->tls.certificate_file);
      file(*tls, "key", "worker.tls.key", &w->tls.key_file);
      file(*tls, "scheduler_ca", "worker.tls.scheduler_ca", &w->tls.peer_ca_file);
    }
    file(wk, "git_token_file", "worker.git_token_file", &w->git_token_file);
    if (str(wk, "port_file", "worker.port_file", false, &w->port_file))
      w->port_file = Resolve(base, w->port_file);
  }
  // The rest is a kiln config without domains: its own parser checks it.
  json rest = doc;
  rest.erase("worker");
  if (rest.contains("domains"))
    bad("domains", "a worker config has no domains (requests carry them)");
  rest.erase("domains");
  for (const ConfigProblem& p : ParseConfigRelativeTo(rest.dump(), base, site))
    if (p.path != "domains") problems.push_back(p);
  *raw = std::move(rest);
  return problems;
}

namespace {

// What the worker shares between its actor and its build threads. Thread-safe.
class WorkerCore {
 public:
  WorkerCore(WorkerSettings s, std::shared_ptr<const Config> site, json raw,
             std::shared_ptr<Builder> containerfile, std::shared_ptr<Builder> layered,
             std::string token)
      : s_(std::move(s)),
        site_(std::move(site)),
        raw_(std::move(raw)),
        containerfile_(std::move(containerfile)),
        layered_(std::move(layered)),
        token_(std::move(token)),
        build_threads_(static_cast<size_t>(s_.slots)),
        push_threads_(static_cast<size_t>(s_.slots)) {
    // Candidates with a checked-out workspace from an earlier run are warm.
    std::error_code ec;
    const fs::path domains = fs::path(site_->server.state_dir) / "worker" / "domains";
    for (const auto& d : fs::directory_iterator(domains, ec)) {
      std::error_code ec2;
      for (const auto& c : fs::directory_iterator(d.path() / "candidates", ec2)) {
        const std::string ck = d.path().filename().string() + "/" + c.path().filename().string();
        if (fs::exists(c.path() / "src", ec2)) warm_.insert(ck);
        // Retention: the directory's mtime stands for the last build of an earlier run.
        struct stat sb {};
        last_built_ms_[ck] = ::stat(c.path().c_str(), &sb) == 0
                                 ? int64_t{sb.st_mtim.tv_sec} * 1000 + sb.st_mtim.tv_nsec / 1000000
                                 : 0;
      }
    }
  }

  const WorkerSettings& settings() const { return s_; }

  json Info() {
    std::lock_guard<std::mutex> lock(mu_);
    return {{"slots", s_.slots}, {"running", running_}, {"warm", warm_}};
  }

  // A build or push of `ck` was admitted (it waits for a thread, then Run): from now until
  // Run ends, the candidate is not evicted.
  void Queued(const std::string& ck) {
    std::lock_guard<std::mutex> lock(mu_);
    ++active_[ck];
  }

  std::shared_ptr<CancelToken> Register(const std::string& build_id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto t = std::make_shared<CancelToken>();
    cancels_[build_id] = t;
    return t;
  }
  void Cancel(const std::string& build_id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cancels_.find(build_id);
    if (it != cancels_.end()) it->second->Cancel();
  }

  // Queues `fn` on the bounded thread pool of `op` (builds or pushes, `slots` threads each;
  // admission in the published actor bounds what waits).
  void Submit(WorkerAdmission::Op op, std::function<void()> fn) {
    (op == WorkerAdmission::Op::kBuild ? build_threads_ : push_threads_).Run(std::move(fn));
  }

  // Runs one build or push to the end (blocking; a thread of the op's pool).
  RemoteBuildAnswer Run(const RemoteBuildRequest& r, const CancelToken* cancel, int64_t received) {
    RemoteBuildAnswer a;
    a.op = r.op;
    a.build_id = r.build_id;
    a.worker = s_.name;
    const std::string ck = r.domain + "/" + r.candidate;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++running_;
    }
    std::shared_ptr<std::mutex> cand = CandidateLock(ck);
    {
      std::lock_guard<std::mutex> one_at_a_time(*cand);
      if (r.op == "build") {
        Build(r, cancel, received, &a);
      } else {
        Push(r, cancel, &a);
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      --running_;
      if (--active_[ck] == 0) active_.erase(ck);
      cancels_.erase(r.build_id);
      if (r.op == "build") {
        last_built_ms_[ck] = WireNowMs();
        if (a.build.status.ok()) awaiting_push_[ck] = WireNowMs();
      } else {
        awaiting_push_.erase(ck);
      }
    }
    if (r.op == "build") {
      // The directory's mtime is the last build for a restarted worker's retention.
      ::utimensat(AT_FDCWD, CandidateDir(r.domain, r.candidate).c_str(), nullptr, 0);
      Prune();
      a.info = Info();  // the scheduler's placement learns what is warm here now
    }
    return a;
  }

  // Evicts the candidates WorkerRetention picks (worker.max_candidates[_per_domain]): their
  // repository, workspace and build storage go, and they are no longer advertised warm. A
  // candidate with a build or push running or waiting, or built and not pushed yet (for
  // kAwaitPushMs), stays.
  void Prune() {
    static constexpr int64_t kAwaitPushMs = 30 * 60 * 1000;
    std::vector<RetainedCandidate> kept;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const int64_t now = WireNowMs();
      for (const auto& [ck, t] : last_built_ms_) {
        const size_t slash = ck.find('/');
        auto push = awaiting_push_.find(ck);
        bool busy = active_.count(ck) > 0 ||
                    (push != awaiting_push_.end() && now - push->second < kAwaitPushMs);
        kept.push_back({ck.substr(0, slash), ck.substr(slash + 1), t, busy});
      }
    }
    for (const std::string& ck : PlanEviction(std::move(kept), s_.retention)) {
      std::shared_ptr<std::mutex> cand = CandidateLock(ck);
      std::unique_lock<std::mutex> one_at_a_time(*cand, std::try_to_lock);
      if (!one_at_a_time.owns_lock()) continue;  // a build of it just started
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (active_.count(ck)) continue;
        warm_.erase(ck);
        last_built_ms_.erase(ck);
        awaiting_push_.erase(ck);
      }
      const size_t slash = ck.find('/');
      const fs::path dir = CandidateDir(ck.substr(0, slash), ck.substr(slash + 1));
      std::error_code ec;
      fs::remove_all(dir, ec);
      if (ec) {
        spdlog::warn("worker: evicting candidate {}: {}", ck, ec.message());
      } else {
        spdlog::info(
            "worker: evicted candidate {} (least recently built; worker.max_candidates {}, per "
            "domain {})",
            ck, s_.retention.max_candidates, s_.retention.max_candidates_per_domain);
      }
    }
  }

 private:
  // <state_dir>/worker/domains/<d>/candidates/<c>: the candidate's repository, workspace and
  // build storage.
  std::string CandidateDir(const std::string& domain, const std::string& candidate) const {
    return site_->server.state_dir + "/worker/domains/" + domain + "/candidates/" + candidate;
  }

  std::shared_ptr<std::mutex> CandidateLock(const std::string& ck) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& m = candidate_locks_[ck];
    if (!m) m = std::make_shared<std::mutex>();
    return m;
  }

  // The request as a BuildJob for this worker's directories, validated by kiln's config parser
  // against the worker's own registries.
  Status MakeJob(const RemoteBuildRequest& r, BuildJob* job) {
    Status st = ValidateName(r.domain, "domain");
    if (st.ok()) st = ValidateName(r.candidate, "candidate");
    if (st.ok()) st = ValidateCommit(r.commit);
    if (!st.ok()) return st;
    if (r.commit.size() != 40 && r.commit.size() != 64)
      return Status::InvalidArgument("build request: commit must be a full id");
    json doc = raw_;
    doc["domains"] = {
        {r.domain,
         {{"token_sha256", {PlaceholderHash()}},
          {"build", r.build},
          {"image", {{"registry", r.image_registry}, {"repository", r.image_repository}}}}}};
    Config parsed;
    std::vector<ConfigProblem> problems = ParseConfigRelativeTo(doc.dump(), s_.config_dir, &parsed);
    if (!problems.empty())
      return Status::InvalidArgument("build request refused: " +
                                     FormatConfigProblem(problems.front()));
    const DomainConfig& dc = parsed.domains.at(r.domain);
    const std::string root = site_->server.state_dir + "/worker/domains/" + r.domain;
    const std::string cdir = CandidateDir(r.domain, r.candidate);
    job->build_id = r.build_id;
    job->domain = r.domain;
    job->candidate = r.candidate;
    job->source_dir = cdir + "/src";
    job->storage_dir = cdir + "/storage";
    job->cache_dir = root + "/cache";
    job->home_dir = site_->server.state_dir + "/worker/home";
    job->build = dc.build;
    job->registry = parsed.registries.at(dc.image.registry);
    job->repository = dc.image.repository;
    job->tag = r.candidate;
    job->key = r.key;
    job->commit = r.commit;
    std::error_code ec;
    fs::create_directories(job->cache_dir, ec);
    fs::create_directories(job->home_dir, ec);
    fs::create_directories(cdir, ec);
    if (ec) return Status::Internal("cannot create the worker's directories: " + ec.message());
    return Status::Ok();
  }

  // Fetches what the candidate's repository lacks of `commit` from the scheduler's git
  // endpoint: the candidate's branch first (usually holds the commit), else every branch.
  Status Fetch(const GitRepo& repo, const RemoteBuildRequest& r, std::string* log) {
    auto has = [&]() {
      GitResult res;
      GitCommand c;
      c.args = {"cat-file", "-e", r.commit + "^{commit}"};
      return repo.RunGit(c, &res).ok() && res.exit_code == 0;
    };
    if (has()) {
      *log += "kiln worker: commit " + r.commit.substr(0, 12) + " already here\n";
      return Status::Ok();
    }
    if (r.git_url.rfind("http://", 0) != 0 && r.git_url.rfind("https://", 0) != 0)
      return Status::InvalidArgument("build request: git_url must be http(s)");
    for (const std::string& spec : {"+refs/heads/" + r.candidate + ":refs/heads/" + r.candidate,
                                    std::string("+refs/heads/*:refs/heads/*")}) {
      GitCommand c;
      c.args = {"fetch", "--quiet", "--no-tags", "--no-write-fetch-head", r.git_url, spec};
      // The credential goes through the environment (not argv, never logged).
      c.env = {{"GIT_CONFIG_COUNT", "1"},
               {"GIT_CONFIG_KEY_0", "http.extraHeader"},
               {"GIT_CONFIG_VALUE_0", "Authorization: Bearer " + token_}};
      GitResult res;
      Status st = repo.RunGit(c, &res);
      if (!st.ok()) return st;
      if (res.exit_code != 0 && spec.find('*') != std::string::npos)
        return Status::Unavailable("git fetch from the scheduler failed: " + res.ErrorSummary());
      if (has()) {
        *log += "kiln worker: fetched " + r.commit.substr(0, 12) + "\n";
        return Status::Ok();
      }
    }
    return Status::NotFound("commit " + r.commit.substr(0, 12) +
                            " is not in the scheduler's repository");
  }

  void Build(const RemoteBuildRequest& r, const CancelToken* cancel, int64_t received,
             RemoteBuildAnswer* a) {
    BuildResult& br = a->build;
    BuildJob job;
    auto t0 = Clock::now();
    br.status = MakeJob(r, &job);
    if (!br.status.ok()) return;
    const auto deadline = t0 + std::chrono::seconds(job.build.timeout_s);
    const std::string words =
        "the build's timeout (build.timeout_s = " + std::to_string(job.build.timeout_s) + " s)";
    RegistryDeadlineScope registry_deadline(deadline, words);
    GitDeadlineScope git_deadline(deadline, words);
    std::unique_ptr<GitRepo> repo;
    Status st = GitRepo::Open(CandidateDir(r.domain, r.candidate) + "/repo.git", &repo);
    if (st.ok()) st = Fetch(*repo, r, &a->log);
    CheckoutStats cs;
    if (st.ok()) st = Checkout::Update(*repo, r.commit, job.source_dir, &cs);
    if (!st.ok()) {
      br.status = Status::Unavailable("worker " + s_.name + ": source of " +
                                      r.commit.substr(0, 12) + ": " + st.message());
      br.failure_kind = "infrastructure";
      return;
    }
    a->log += "kiln worker " + s_.name + ": checked out " + r.commit.substr(0, 12) + " (" +
              std::to_string(cs.files_written) + " files written)\n";
    if (cancel->cancelled()) {
      br.status = Status::Cancelled("build cancelled");
      return;
    }
    Builder& b = job.build.mode == "layered" ? *layered_ : *containerfile_;
    const int64_t start = WireNowMs();
    std::string out;
    br = b.Build(
        job,
        [&](std::string_view chunk) {
          if (out.size() < (8u << 20)) out.append(chunk);
        },
        cancel);
    a->log += out;
    if (r.sent_unix_ms > 0) {
      br.timings["dispatch_ms"] = received - r.sent_unix_ms;
      br.timings["to_builder_ms"] = start - r.sent_unix_ms;
    }
    if (br.status.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      warm_.insert(r.domain + "/" + r.candidate);
    }
  }

  void Push(const RemoteBuildRequest& r, const CancelToken* cancel, RemoteBuildAnswer* a) {
    BuildJob job;
    a->push.status = MakeJob(r, &job);
    if (!a->push.status.ok()) return;
    RegistryDeadlineScope registry_deadline(
        Clock::now() + std::chrono::seconds(job.build.timeout_s), "the build's timeout");
    BuildResult built;
    built.image_id = r.image_id;
    Builder& b = job.build.mode == "layered" ? *layered_ : *containerfile_;
    auto log = [&](std::string_view chunk) { a->log.append(chunk); };
    // Issue 20: upload_blobs runs before the scheduler's push-lane grant, push inside it.
    a->push = r.op == "upload_blobs" ? b.UploadBlobs(job, built, log, cancel)
                                     : b.Push(job, built, log, cancel);
  }

  const WorkerSettings s_;
  const std::shared_ptr<const Config> site_;
  const json raw_;
  std::shared_ptr<Builder> containerfile_, layered_;
  const std::string token_;
  std::mutex mu_;
  int running_ = 0;  // builds and pushes running now (not those waiting for a thread)
  std::set<std::string> warm_;
  std::map<std::string, int> active_;             // candidate -> builds/pushes running or waiting
  std::map<std::string, int64_t> last_built_ms_;  // candidate -> unix ms of its last build
  std::map<std::string, int64_t> awaiting_push_;  // candidate -> when its image was built
  std::map<std::string, std::shared_ptr<CancelToken>> cancels_;
  std::map<std::string, std::shared_ptr<std::mutex>> candidate_locks_;
  // Last: destroyed first. Their threads keep the pools' shared state and the closures keep
  // this core alive until they end.
  BlockingWork build_threads_;
  BlockingWork push_threads_;
};

struct FrontState {
  // Requests waiting for a running build or push, by job number; a job's key ("op build_id
  // hash-of-the-request-text")
  // and the running job of each key: a request for a key already running joins that job, so
  // a scheduler that re-sends after its connection dropped never starts a second build or
  // push of one build id on this worker.
  std::map<uint64_t, std::vector<caf::typed_response_promise<std::string>>> open;
  std::map<uint64_t, std::string> key_of;
  std::map<std::string, uint64_t> running;
  // The last answers, by key (bounded): a request for a key that already ended gets its answer
  // again (the scheduler's connection may have dropped just before it was delivered).
  std::map<std::string, std::string> done;
  std::deque<std::string> done_order;
  size_t done_bytes = 0;
  uint64_t next = 0;
  std::optional<WorkerAdmission> admission;  // set when the actor starts
};

WorkerAdmission::Op OpOf(const std::string& key) {
  return key.rfind("build ", 0) == 0 ? WorkerAdmission::Op::kBuild : WorkerAdmission::Op::kPush;
}

constexpr size_t kDoneAnswers = 64;
constexpr size_t kDoneBytes = 64u << 20;

// The published actor. A build or push runs on a thread of its own; its answer comes back as
// a `_done` message carrying this process's nonce (the scheduler cannot forge it), which
// delivers the promises of every request for it. Never blocks.
remote_builder_actor::behavior_type Front(remote_builder_actor::stateful_pointer<FrontState> self,
                                          std::shared_ptr<WorkerCore> core, std::string nonce) {
  self->state.admission.emplace(core->settings().slots);
  return {[=](remote_build_atom, const std::string& text) -> caf::result<std::string> {
    FrontState& st = self->state;
    json j = json::parse(text, nullptr, false);
    if (j.is_object() && j.value("op", "") == "_done") {
      if (j.value("nonce", "") != nonce) return std::string("{}");
      const uint64_t job = j.value("job", uint64_t{0});
      const std::string answer = j.value("answer", std::string());
      auto it = st.open.find(job);
      if (it != st.open.end()) {
        for (auto& rp : it->second) rp.deliver(answer);
        st.open.erase(it);
      }
      auto k = st.key_of.find(job);
      if (k != st.key_of.end()) {
        st.admission->Done(OpOf(k->second));
        st.running.erase(k->second);
        if (st.done.emplace(k->second, answer).second) {
          st.done_order.push_back(k->second);
          st.done_bytes += answer.size();
        }
        st.key_of.erase(k);
        while (!st.done_order.empty() &&
               (st.done_order.size() > kDoneAnswers || st.done_bytes > kDoneBytes)) {
          auto d = st.done.find(st.done_order.front());
          st.done_bytes -= d->second.size();
          st.done.erase(d);
          st.done_order.pop_front();
        }
      }
      return std::string("{}");
    }
    RemoteBuildRequest r;
    Status parsed = RemoteBuildRequestFromText(text, &r);
    RemoteBuildAnswer a;
    a.op = r.op;
    a.build_id = r.build_id;
    a.worker = core->settings().name;
    if (!parsed.ok()) {
      a.op = "build";
      a.build.status = parsed;
      return RemoteBuildAnswerToText(a);
    }
    if (r.op == "info") {
      a.info = core->Info();
      return RemoteBuildAnswerToText(a);
    }
    if (r.op == "cancel") {
      core->Cancel(r.build_id);
      return RemoteBuildAnswerToText(a);
    }
    if (r.op == "attach") {
      // Issue 20: a restarted scheduler asks after a build it had dispatched. Never starts
      // one: joins the running build of that id, answers the one that ended again, or says
      // it does not know it.
      const std::string prefix = "build " + r.build_id + " ";
      for (const auto& [key, job] : st.running)
        if (key.rfind(prefix, 0) == 0) {
          spdlog::info("worker: attach {}: joining the running build", r.build_id);
          auto rp = self->make_response_promise<std::string>();
          st.open[job].push_back(rp);
          return rp;
        }
      for (auto k = st.done_order.rbegin(); k != st.done_order.rend(); ++k)  // the latest
        if (k->rfind(prefix, 0) == 0) {
          spdlog::info("worker: attach {}: it ended, answering again", r.build_id);
          return st.done.at(*k);
        }
      spdlog::info("worker: attach {}: unknown build, nothing started", r.build_id);
      a.op = "build";
      a.build.status = Status::NotFound("worker " + a.worker + " has no build " + r.build_id +
                                        " running or recently ended");
      a.build.failure_kind = "unknown_build";
      return RemoteBuildAnswerToText(a);
    }
    if (r.op != "build" && r.op != "push" && r.op != "upload_blobs") {
      a.op = "build";
      a.build.status = Status::InvalidArgument("unknown op '" + r.op + "'");
      return RemoteBuildAnswerToText(a);
    }
    // The same request text (a re-send) — not merely the same build id — is the same job.
    const std::string key =
        r.op + " " + r.build_id + " " + std::to_string(std::hash<std::string>{}(text));
    if (auto d = st.done.find(key); d != st.done.end()) {
      spdlog::info("worker: {} {} asked again: it ended, answering again", r.op, r.build_id);
      return d->second;
    }
    if (auto run = st.running.find(key); run != st.running.end()) {
      spdlog::info("worker: {} {} asked again: joining the running one", r.op, r.build_id);
      auto rp = self->make_response_promise<std::string>();
      st.open[run->second].push_back(rp);
      return rp;
    }
    const WorkerAdmission::Op op = OpOf(key);
    if (!st.admission->Admit(op)) {
      spdlog::warn("worker: {} {} refused: busy", r.op, r.build_id);
      a.busy = true;
      Status busy = Status::ResourceExhausted(st.admission->BusyMessage(op, a.worker));
      (r.op == "build" ? a.build.status : a.push.status) = busy;
      a.build.failure_kind = "infrastructure";
      return RemoteBuildAnswerToText(a);
    }
    auto rp = self->make_response_promise<std::string>();
    const uint64_t job = st.next++;
    st.open[job].push_back(rp);
    st.key_of[job] = key;
    st.running[key] = job;
    auto cancel = core->Register(r.build_id);
    core->Queued(r.domain + "/" + r.candidate);
    caf::actor me = caf::actor_cast<caf::actor>(self);
    spdlog::info("worker: {} {} of {}/{} ({})", r.op, r.build_id, r.domain, r.candidate,
                 r.commit.substr(0, 12));
    const int64_t received = WireNowMs();
    core->Submit(op, [core, r, cancel, me, job, nonce, received] {
      RemoteBuildAnswer ans = core->Run(r, cancel.get(), received);
      spdlog::info("worker: {} {} ended: {}", r.op, r.build_id,
                   (r.op == "build" ? ans.build.status : ans.push.status).ToString());
      json done = {{"op", "_done"},
                   {"nonce", nonce},
                   {"job", job},
                   {"answer", RemoteBuildAnswerToText(ans)}};
      caf::anon_send(me, remote_build_atom::value, done.dump());
    });
    return rp;
  }};
}

std::string RandomHex() {
  std::random_device rd;
  std::string s;
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) s += hex[rd() % 16];
  return s;
}

}  // namespace

int WorkerCommand(const std::string& config_path) {
  WorkerSettings ws;
  auto site = std::make_shared<Config>();
  json raw;
  std::vector<ConfigProblem> problems = LoadWorkerConfig(config_path, &ws, site.get(), &raw);
  if (!problems.empty()) {
    for (const ConfigProblem& p : problems)
      std::fprintf(stderr, "%s: %s\n", config_path.c_str(), FormatConfigProblem(p).c_str());
    return 1;
  }
  InitLogging(site->log_level);
  std::string token;
  {
    std::ifstream in(ws.git_token_file);
    std::getline(in, token);
    while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  }
  if (token.empty()) {
    std::fprintf(stderr, "%s: worker.git_token_file: the file is empty\n", config_path.c_str());
    return 1;
  }
  // The same builders `kiln serve` composes.
  RuntimeOptions opts;
  opts.deploy = false;
  opts.readiness_checks = false;
  std::shared_ptr<const Config> csite = site;
  ComposeRuntime(csite, &opts);
  auto core = std::make_shared<WorkerCore>(ws, csite, raw, opts.builder,
                                           opts.layered ? opts.layered : opts.builder, token);
  token.assign(token.size(), '\0');

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  int rc = 0;
  {
    PoolSystemConfig cfg(ws.tls);
    cfg.set("scheduler.max-threads", size_t{2});
    caf::actor_system sys(cfg);
    auto front = sys.spawn(Front, core, RandomHex());
    uint16_t port = 0;
    Status st =
        PublishRemoteBuilder(front, static_cast<uint16_t>(ws.listen_port), &port, ws.listen_host);
    if (!st.ok()) {
      spdlog::error("{}", st.message());
      rc = 1;
    } else {
      if (!ws.port_file.empty()) {
        Status wr = WriteFileAtomic(ws.port_file, std::to_string(port) + "\n");
        if (!wr.ok()) spdlog::warn("cannot write worker.port_file: {}", wr.message());
      }
      spdlog::info("kiln worker {} listening on {}:{} ({} slots, mutual TLS), state in {}", ws.name,
                   ws.listen_host, port, ws.slots, site->server.state_dir);
      int sig = 0;
      sigwait(&set, &sig);
      spdlog::info("signal {}: stopping", sig);
    }
    caf::anon_send_exit(front, caf::exit_reason::user_shutdown);
  }
  return rc;
}

}  // namespace kiln
