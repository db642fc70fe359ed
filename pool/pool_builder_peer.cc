// pool_builder_peer DIR NAME PORT_FILE: a stand-in worker for pool_builder_test. Publishes a
// remote builder over mutual TLS (DIR/NAME.{crt,key}, accepting DIR/scheduler-ca.crt), writes
// its port to PORT_FILE and runs until killed. It answers op info (1 slot), answers a build at
// once with image id "<NAME>:<build id>" — except a build of a candidate named "hang*", which it
// keeps open (a build in progress when the worker is killed) — and a push with a digest naming
// itself. Every request is appended to DIR/NAME.requests (one line each).
#include <caf/typed_event_based_actor.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "pool/build_wire.h"
#include "pool/remote_builder.h"

namespace {

struct PeerState {
  std::vector<caf::typed_response_promise<std::string>> open;
};

kiln::remote_builder_actor::behavior_type Peer(
    kiln::remote_builder_actor::stateful_pointer<PeerState> self, std::string dir,
    std::string name) {
  return {[=](kiln::remote_build_atom, const std::string& text) -> caf::result<std::string> {
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
      if (r.candidate.rfind("hang", 0) == 0) {
        auto rp = self->make_response_promise<std::string>();
        self->state.open.push_back(rp);
        return rp;
      }
      a.build.image_id = name + ":" + r.build_id;
      a.log = "built on " + name + "\n";
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
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
}
