// remote_builder_peer DIR PORT_FILE: a worker process for remote_builder_test. Publishes a
// builder over mutual TLS with DIR/worker.{crt,key}, accepting DIR/scheduler-ca.crt, writes the
// bound port to PORT_FILE and runs until killed. Its builder answers a request at once, except
// one containing "hang", which it keeps open (a build in progress when the worker is killed).
#include <caf/typed_event_based_actor.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "pool/remote_builder.h"

namespace {

struct PeerState {
  std::vector<caf::typed_response_promise<std::string>> open;  // "hang" requests, never answered
};

kiln::remote_builder_actor::behavior_type Peer(
    kiln::remote_builder_actor::stateful_pointer<PeerState> self) {
  return {[=](kiln::remote_build_atom, const std::string& req) -> caf::result<std::string> {
    if (req.find("hang") != std::string::npos) {
      auto rp = self->make_response_promise<std::string>();
      self->state.open.push_back(rp);
      return rp;
    }
    return req;
  }};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: remote_builder_peer DIR PORT_FILE\n");
    return 2;
  }
  const std::string d = argv[1];
  kiln::PoolSystemConfig cfg({d + "/worker.crt", d + "/worker.key", d + "/scheduler-ca.crt"});
  caf::actor_system sys(cfg);
  auto builder = sys.spawn(Peer);
  uint16_t port = 0;
  kiln::Status st = kiln::PublishRemoteBuilder(builder, 0, &port);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.message().c_str());
    return 1;
  }
  { std::ofstream(std::string(argv[2]) + ".tmp") << port; }
  std::rename((std::string(argv[2]) + ".tmp").c_str(), argv[2]);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
}
