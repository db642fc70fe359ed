#include "pool/build_wire.h"

#include <chrono>

namespace kiln {

using nlohmann::json;

json BuildConfigToJson(const BuildConfig& b) {
  json j;
  j["mode"] = b.mode;
  j["timeout_s"] = b.timeout_s;
  j["network"] = b.network;
  j["compression"] = b.compression;
  j["user"] = b.user;
  j["max_file_mb"] = b.max_file_mb;
  if (b.base_images) j["base_images"] = *b.base_images;
  j["limits"] = {{"max_processes", b.limits.max_processes},
                 {"max_memory_mb", b.limits.max_memory_mb}};
  json cf = {{"file", b.containerfile.file},
             {"context", b.containerfile.context},
             {"build_args", b.containerfile.build_args}};
  if (b.containerfile.target) cf["target"] = *b.containerfile.target;
  // Only when set: a worker of the previous release refuses keys it does not know.
  if (b.containerfile.step_cache != "auto") cf["step_cache"] = b.containerfile.step_cache;
  j["containerfile"] = cf;
  if (b.layered) {
    json outs = json::array();
    for (const LayeredOutput& o : b.layered->outputs)
      outs.push_back({{"from", o.from}, {"to", o.to}});
    j["layered"] = {{"base_image", b.layered->base_image},
                    {"command", b.layered->command},
                    {"env", b.layered->env},
                    {"caches", b.layered->caches},
                    {"outputs", outs},
                    {"entrypoint", b.layered->entrypoint}};
  }
  j["on_push"] = b.on_push;
  j["cancel_on_disconnect"] = b.cancel_on_disconnect;
  return j;
}

std::string RemoteBuildRequestToText(const RemoteBuildRequest& r) {
  json j = {{"op", r.op},
            {"build_id", r.build_id},
            {"domain", r.domain},
            {"candidate", r.candidate},
            {"commit", r.commit},
            {"key", r.key},
            {"git_url", r.git_url},
            {"image", {{"registry", r.image_registry}, {"repository", r.image_repository}}},
            {"build", r.build},
            {"image_id", r.image_id},
            {"sent_unix_ms", r.sent_unix_ms}};
  return j.dump();
}

Status RemoteBuildRequestFromText(const std::string& text, RemoteBuildRequest* out) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return Status::InvalidArgument("build request: not a JSON object");
  auto str = [&](const json& o, const char* k, std::string* v) -> Status {
    auto it = o.find(k);
    if (it == o.end() || !it->is_string())
      return Status::InvalidArgument(std::string("build request: '") + k + "' must be a string");
    *v = it->get<std::string>();
    return Status::Ok();
  };
  RemoteBuildRequest r;
  for (auto [k, v] : {std::pair<const char*, std::string*>{"op", &r.op},
                      {"build_id", &r.build_id},
                      {"domain", &r.domain},
                      {"candidate", &r.candidate},
                      {"commit", &r.commit},
                      {"key", &r.key},
                      {"git_url", &r.git_url},
                      {"image_id", &r.image_id}}) {
    Status st = str(j, k, v);
    if (!st.ok()) return st;
  }
  auto img = j.find("image");
  if (img == j.end() || !img->is_object())
    return Status::InvalidArgument("build request: 'image' must be an object");
  Status st = str(*img, "registry", &r.image_registry);
  if (st.ok()) st = str(*img, "repository", &r.image_repository);
  if (!st.ok()) return st;
  auto b = j.find("build");
  if (b == j.end() || !b->is_object())
    return Status::InvalidArgument("build request: 'build' must be an object");
  r.build = *b;
  auto sent = j.find("sent_unix_ms");
  if (sent != j.end() && sent->is_number_integer()) r.sent_unix_ms = sent->get<int64_t>();
  *out = std::move(r);
  return Status::Ok();
}

int64_t WireNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

Status StatusFromWire(int code, const std::string& m) {
  switch (static_cast<Status::Code>(code)) {
    case Status::Code::kOk:
      return Status::Ok();
    case Status::Code::kInvalidArgument:
      return Status::InvalidArgument(m);
    case Status::Code::kNotFound:
      return Status::NotFound(m);
    case Status::Code::kFailedPrecondition:
      return Status::FailedPrecondition(m);
    case Status::Code::kUnavailable:
      return Status::Unavailable(m);
    case Status::Code::kCancelled:
      return Status::Cancelled(m);
    case Status::Code::kDeadlineExceeded:
      return Status::DeadlineExceeded(m);
    case Status::Code::kPermissionDenied:
      return Status::PermissionDenied(m);
    case Status::Code::kResourceExhausted:
      return Status::ResourceExhausted(m);
    case Status::Code::kInternal:
      break;
  }
  return Status::Internal(m);
}

namespace {
json StatusJson(const Status& s) {
  return {{"code", static_cast<int>(s.code())}, {"message", s.message()}};
}
Status StatusOf(const json& j) {
  if (!j.is_object()) return Status::Internal("worker answer without a status");
  return StatusFromWire(j.value("code", static_cast<int>(Status::Code::kInternal)),
                        j.value("message", std::string()));
}
}  // namespace

std::string RemoteBuildAnswerToText(const RemoteBuildAnswer& a) {
  json j = {{"op", a.op}, {"build_id", a.build_id}, {"worker", a.worker}, {"log", a.log}};
  if (a.busy) j["busy"] = true;
  if (a.op == "build") {
    j["status"] = StatusJson(a.build.status);
    j["compile_failed"] = a.build.compile_failed;
    j["failure_kind"] = a.build.failure_kind;
    j["image_id"] = a.build.image_id;
    j["diagnostics"] = DiagnosticsToJson(a.build.diagnostics);
    j["elapsed_ms"] = a.build.elapsed_ms;
    j["timings"] = a.build.timings;
  } else if ((a.op == "push" || a.op == "upload_blobs")) {
    j["status"] = StatusJson(a.push.status);
    j["digest"] = a.push.digest;
    j["ref"] = a.push.ref;
    j["elapsed_ms"] = a.push.elapsed_ms;
  }
  // op info; a build's answer carries what the worker holds warm after it (it may have evicted
  // candidates).
  if ((a.op != "build" && a.op != "push") || !a.info.empty()) j["info"] = a.info;
  return j.dump();
}

Status RemoteBuildAnswerFromText(const std::string& text, RemoteBuildAnswer* out) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("op") || !j["op"].is_string())
    return Status::Internal("the worker's answer is not a JSON object with an op");
  RemoteBuildAnswer a;
  try {
    a.op = j["op"].get<std::string>();
    a.build_id = j.value("build_id", std::string());
    a.worker = j.value("worker", std::string());
    a.log = j.value("log", std::string());
    a.busy = j.value("busy", false);
    if (a.op == "build") {
      a.build.status = StatusOf(j.value("status", json()));
      a.build.compile_failed = j.value("compile_failed", false);
      a.build.failure_kind = j.value("failure_kind", std::string());
      a.build.image_id = j.value("image_id", std::string());
      a.build.diagnostics = DiagnosticsFromJson(j.value("diagnostics", json::array()));
      a.build.elapsed_ms = j.value("elapsed_ms", int64_t{0});
      a.build.timings = j.value("timings", std::map<std::string, int64_t>());
    } else if ((a.op == "push" || a.op == "upload_blobs")) {
      a.push.status = StatusOf(j.value("status", json()));
      a.push.digest = j.value("digest", std::string());
      a.push.ref = j.value("ref", std::string());
      a.push.elapsed_ms = j.value("elapsed_ms", int64_t{0});
    }
    a.info = j.value("info", json::object());
  } catch (const json::exception& e) {
    return Status::Internal(std::string("the worker's answer is malformed: ") + e.what());
  }
  *out = std::move(a);
  return Status::Ok();
}

}  // namespace kiln
