// pool_builder_peer DIR NAME PORT_FILE: a stand-in worker for pool_builder_test. Publishes a
// remote builder over mutual TLS (DIR/NAME.{crt,key}, accepting DIR/scheduler-ca.crt), writes
// its port to PORT_FILE and runs until killed. It answers op info (1 slot), answers a build at
// once with image id "<NAME>:<build id>" — except a build of a candidate named "hang*", which it
// keeps open (a build in progress when the worker is killed) until the file DIR/NAME.release
// exists, then answers it like any build — and a push with a digest naming itself. A build id
// asked again while it is held joins the held build (as `kiln worker` does: one build per id).
// Every request is appended to DIR/NAME.requests (one line each).
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "pool/build_wire.h"
#include "pool/remote_builder.h"

namespace {

struct PeerState {
  // Held builds: build id -> the promises of every request for it.
  std::map<std::string, std::vector<caf::typed_response_promise<std::string>>> open;
};

std::string Built(const std::string& name, const std::string& build_id) {
  kiln::RemoteBuildAnswer a;
  a.op = "build";
  a.build_id = build_id;
  a.worker = name;
  a.build.image_id = name + ":" + build_id;
  a.log = "built on " + name + "\n";
  return kiln::RemoteBuildAnswerToText(a);
}

kiln::remote_builder_actor::behavior_type Peer(
    kiln::remote_builder_actor::stateful_pointer<PeerState> self, std::string dir,
    std::string name) {
  return {[=](kiln::remote_build_atom, const std::string& text) -> caf::result<std::string> {
    if (text == "_release") {  // from this process's release watcher (below)
      for (auto& [id, rps] : self->state.open)
        for (auto& rp : rps) rp.deliver(Built(name, id));
      self->state.open.clear();
      return std::string("{}");
    }
    std::ofstream(dir + "/" + name + ".requests", std::ios::app) << text << "\n";
    kiln::RemoteBuildRequest r;
    kiln::RemoteBuildAnswer a;
    if (!kiln::RemoteBuildRequestFromText(text, &r).ok()) return std::string("{}");
    a.op = r.op;
    a.build_id = r.build_id;
    a.worker = name;
    if (r.op == "info") {
      a.info = {{"slots", 1}, {"warm", nlohmann::json::array()}};
    } else if (r.op == "build") {
      if (r.candidate.rfind("hang", 0) == 0 &&
          !std::filesystem::exists(dir + "/" + name + ".release")) {
        auto rp = self->make_response_promise<std::string>();
        self->state.open[r.build_id].push_back(rp);
        return rp;
      }
      return Built(name, r.build_id);
    } else if (r.op == "push") {
      a.push.digest = "sha256:" + name;
      a.push.ref = "pushed-by-" + name + "/" + r.image_id;
    }
    return kiln::RemoteBuildAnswerToText(a);
  }};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: pool_builder_peer DIR NAME PORT_FILE\n");
    return 2;
  }
  const std::string d = argv[1], name = argv[2];
  kiln::PoolSystemConfig cfg(
      {d + "/" + name + ".crt", d + "/" + name + ".key", d + "/scheduler-ca.crt"});
  caf::actor_system sys(cfg);
  auto builder = sys.spawn(Peer, d, name);
  uint16_t port = 0;
  kiln::Status st = kiln::PublishRemoteBuilder(builder, 0, &port);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 1;
  }
  { std::ofstream(std::string(argv[3]) + ".tmp") << port; }
  std::rename((std::string(argv[3]) + ".tmp").c_str(), argv[3]);
  // Releases the held builds once DIR/NAME.release exists (polled; the test creates it).
  const std::string release = d + "/" + name + ".release";
  for (bool released = false;; std::this_thread::sleep_for(std::chrono::milliseconds(20))) {
    if (!released && std::filesystem::exists(release)) {
      caf::anon_send(builder, kiln::remote_build_atom::value, std::string("_release"));
      released = true;
    }
  }
}
