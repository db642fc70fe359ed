// McpModernDispatch: MCP protocol revision 2026-07-28 (stateless) on /mcp, beside the session
// revisions McpHandler serves. Pure: turns one classified POST into an McpDecision (an
// immediate reply, or one call for the ToolBackend); no I/O, no CAF.
//
// Era classification (ClassifyMcpEra): a POST whose body is a request or notification with
// `_meta["io.modelcontextprotocol/protocolVersion"]`, or whose MCP-Protocol-Version header
// names 2026-07-28 or later, is modern; everything else stays with the session revisions
// (2025-11-25, 2025-06-18, 2025-03-26), unchanged. The two eras never mix in one request.
//
// Validation ladder (the first failing rung answers):
//   1. JSON-RPC shape: an object with jsonrpc "2.0", a string method, a valid id -> else 400
//      -32600 (a posted response or batch is refused the same way);
//   2. version: a modern header without the `_meta` claim -> 400 -32602; the
//      MCP-Protocol-Version header must be present and equal the claim -> else 400
//      HeaderMismatch -32020; the claim must be a supported modern version -> else 400
//      UnsupportedProtocolVersion -32022 with data {supported, requested};
//   3. envelope: clientCapabilities an object, clientInfo an object when present, logLevel a
//      known level when present -> else 400 -32602;
//   4. Mcp-Method must equal the body method; Mcp-Name must equal params.name (tools/call) or
//      params.taskId (tasks/get, tasks/cancel), Base64 sentinel decoded -> else 400 -32020;
//   5. method registry: server/discover, tools/list, tools/call, tasks/get, tasks/cancel;
//      anything else (initialize, ping, logging/setLevel, subscriptions/listen, ...) -> 404
//      -32601;
//   6. params -> in-band -32602 (HTTP 200).
// Notifications are validated through rung 3 and then acknowledged (202): the revision has
// none that kiln acts on (cancellation is closing the request's stream).
//
// Every result carries resultType and `_meta["io.modelcontextprotocol/serverInfo"]`. A
// tools/call of build_candidate or deploy_candidate from a client that lists the tasks extension in
// this request's clientCapabilities.extensions (and does not pass wait: false) becomes a task (see
// transport/mcp_tasks.h).
//
// Thread-safety: immutable after construction; Handle is const and thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "transport/mcp_handler.h"

namespace kiln {

inline constexpr const char* kMcpModernProtocolVersion = "2026-07-28";
inline constexpr const char* kMetaProtocolVersion = "io.modelcontextprotocol/protocolVersion";
inline constexpr const char* kMetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities";
inline constexpr const char* kMetaClientInfo = "io.modelcontextprotocol/clientInfo";
inline constexpr const char* kMetaServerInfo = "io.modelcontextprotocol/serverInfo";
inline constexpr const char* kMetaLogLevel = "io.modelcontextprotocol/logLevel";

namespace rpc {
inline constexpr int kHeaderMismatch = -32020;
inline constexpr int kUnsupportedProtocolVersion = -32022;
}  // namespace rpc

enum class McpEra { kLegacy, kModern };

/// True for version strings of the stateless era (2026-07-28 and later, by date order).
bool IsModernMcpVersionName(std::string_view version);
/// True for the modern versions kiln speaks.
bool IsSupportedModernVersion(std::string_view version);

/// Which era a POST belongs to (see the header comment).
McpEra ClassifyMcpEra(const std::optional<std::string>& protocol_header,
                      const nlohmann::json& body);

/// An Mcp-Name / Mcp-Param value as sent: plain visible ASCII, or "=?base64?<b64>?=" for any
/// other text. nullopt when the sentinel's Base64 is malformed.
std::optional<std::string> DecodeMcpHeaderValue(std::string_view value);

class McpModernDispatch {
 public:
  struct Options {
    std::string server_version = "0.1.0";
    std::string instructions;
    int64_t tools_ttl_ms = 300000;  // tools/list cache hint (the catalog changes on restart)
    int64_t task_ttl_ms = 3600000;
    int64_t task_poll_interval_ms = 1000;
    std::function<int64_t()> wall_clock_ms;  // default: system_clock, Unix milliseconds
  };

  McpModernDispatch(Options options, const ToolCatalog& catalog,
                    const std::map<std::string, std::map<std::string, std::string>>& aliases);

  /// `body` is the parsed POST body; `seq` a unique number for the call (if one results).
  McpDecision Handle(const McpRequest& request, const nlohmann::json& body, bool accept_sse,
                     uint64_t seq) const;

  /// The server/discover result (without resultType/_meta).
  nlohmann::json DiscoverResult() const;

 private:
  const Options options_;
  const ToolCatalog& catalog_;
  const std::map<std::string, std::map<std::string, std::string>>& aliases_;
  const nlohmann::json result_meta_;  // {serverInfo}: the _meta of every result
};

}  // namespace kiln
