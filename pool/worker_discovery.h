// Worker discovery (issue 20): which kiln workers exist and which are ready.
//
// - PoolMember: one worker as the scheduler addresses it (id, host, port, ready).
// - EndpointSliceTracker (pure, no I/O): the state of the worker Service's EndpointSlices
//   (discovery.k8s.io/v1) from a list and the watch events after it — ADDED / MODIFIED /
//   DELETED replace or drop a slice, BOOKMARK only advances the resourceVersion, ERROR with a
//   410 Status (Expired/Gone) asks for a re-list. Members() merges the slices: one member per
//   endpoint (id = the pod's hostname, else targetRef.name, else the first address), ready per
//   the endpoint's `conditions.ready` (absent = ready, as the API documents; a terminating
//   endpoint is not ready), port = the slice port named `port_name` (else the first port).
// - EndpointSliceWatcher: list, then bounded watches from the last resourceVersion, re-listing
//   on 410, over a SliceApi (real: KubeSliceApi over KubeClient; tests use the fake API server).
// - StaticWorkers: the `scheduler.workers` list of a bare machine as members (always ready).
// - ApplyMembers: brings a Placement in line with a member list (join, leave, ready/not ready).
//
// Thread-safety: none of these is thread-safe; each is owned by one thread (the watcher by the
// thread that polls it, whose Poll() blocks on the API server for up to the watch timeout).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "k8s/kube_client.h"
#include "pool/placement.h"

namespace kiln {

struct PoolMember {
  std::string id;    // worker name (the StatefulSet pod's hostname)
  std::string host;  // address to dial
  int port = 0;
  bool ready = false;
  bool operator==(const PoolMember& o) const {
    return id == o.id && host == o.host && port == o.port && ready == o.ready;
  }
};

class EndpointSliceTracker {
 public:
  explicit EndpointSliceTracker(std::string port_name) : port_name_(std::move(port_name)) {}

  /// Replaces everything with an EndpointSliceList. InvalidArgument when it is not one (no
  /// items array or no metadata.resourceVersion); the state is then unchanged.
  Status ApplyList(const nlohmann::json& list);

  enum class EventResult { kApplied, kRelist, kIgnored };
  /// One watch event. kRelist for ERROR 410 (the caller must list again); kIgnored for an
  /// event that is not understood (its resourceVersion is not taken).
  EventResult ApplyEvent(const nlohmann::json& event);

  /// The members, sorted by id. An id in several slices: ready if ready in any.
  std::vector<PoolMember> Members() const;
  const std::string& resource_version() const { return rv_; }
  bool listed() const { return !rv_.empty(); }

 private:
  const std::string port_name_;
  std::string rv_;
  std::map<std::string, nlohmann::json> slices_;  // name -> EndpointSlice
};

/// The API calls the watcher needs; KubeSliceApi is the real one.
class SliceApi {
 public:
  virtual ~SliceApi() = default;
  virtual Status List(nlohmann::json* out, KubeCallError* err) = 0;
  virtual Status Watch(const std::string& resource_version, std::string* stream,
                       KubeCallError* err) = 0;
};

/// SliceApi over a KubeClient for `ns` and the Service's slices (label
/// kubernetes.io/service-name=<service>). Borrows the client: it must outlive this.
class KubeSliceApi : public SliceApi {
 public:
  KubeSliceApi(KubeClient* client, std::string ns, std::string service, int watch_timeout_s);
  Status List(nlohmann::json* out, KubeCallError* err) override;
  Status Watch(const std::string& resource_version, std::string* stream,
               KubeCallError* err) override;

 private:
  KubeClient* const client_;
  const std::string ns_, selector_;
  const int watch_timeout_s_;
};

class EndpointSliceWatcher {
 public:
  using OnChange = std::function<void(const std::vector<PoolMember>&)>;
  /// Borrows `api` (must outlive this). `on_change` runs on the polling thread whenever the
  /// member list differs from the last one reported (the first successful list included).
  EndpointSliceWatcher(SliceApi* api, std::string port_name, OnChange on_change);

  /// One round: list when nothing is listed yet (or after a 410), else one bounded watch from
  /// the last resourceVersion; re-lists within the same round after a 410. The error of a
  /// failed call (the last members stay as they were; call again after a back-off).
  Status Poll();

  std::vector<PoolMember> Members() const { return tracker_.Members(); }
  const std::string& resource_version() const { return tracker_.resource_version(); }
  size_t lists() const { return lists_; }

 private:
  Status List();
  void Report();

  SliceApi* const api_;
  EndpointSliceTracker tracker_;
  OnChange on_change_;
  std::vector<PoolMember> reported_;
  bool reported_once_ = false;
  size_t lists_ = 0;
};

/// `scheduler.workers` entries ("host:port", IPv6 as "[addr]:port") as ready members named
/// by the entry itself. InvalidArgument "scheduler.workers[i]: ..." for a malformed entry
/// (no port, port out of 1..65535, empty host) or a duplicate.
Status StaticWorkers(const std::vector<std::string>& entries, std::vector<PoolMember>* out);

/// Makes `placement` match `members` at `now`: new ready members join with `slots`, members
/// not ready are set not ready, workers no longer listed are removed. Returns the ids removed
/// (their running builds must be retried elsewhere).
std::vector<std::string> ApplyMembers(const std::vector<PoolMember>& members, size_t slots,
                                      double now, Placement* placement);

}  // namespace kiln
