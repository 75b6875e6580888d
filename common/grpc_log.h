// gRPC's own log lines (gpr_log, e.g. "E1202 ... Handshake failed") kept
// quiet: what they describe reaches the user as meshrun's own one line
// (a TLS mismatch named by ProbeTlsMismatch, a lost server, ...).
#pragma once

namespace meshrun {

// Sees every gRPC log line: the source file and the message.
using GrpcLogObserver = void (*)(const char* file, const char* message);

// Sends gRPC's log lines to the "grpc" logger (common/logging.h) at debug
// level, so they show only when MESHRUN_LOG_LEVEL=debug (or trace) asks for
// them. Every gRPC client and server of meshrun calls it before gRPC logs
// anything (client/channel.h's NewChannel, the rendezvous server's Start).
// `observer`, when not null, also sees every line from now on (the last
// one given wins). Idempotent; thread-safe.
void RouteGrpcLogs(GrpcLogObserver observer = nullptr);

}  // namespace meshrun
