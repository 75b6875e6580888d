// Requests whose bytes do not parse. gRPC's C++ callback server answers such
// a call UNIMPLEMENTED with an empty message (its handler never runs), which
// tells a client nothing. For meshrun's request messages, deserialization
// never fails instead: a request that does not parse arrives empty and
// marked (MalformedBytes), and the service refuses it INVALID_ARGUMENT
// naming the message type and its size (rendezvous/grpc/requests.h,
// CheckWellFormed). The generated rendezvous.grpc.pb.h includes this header
// (protoc's additional_header_includes), so every user of the service's
// code sees the same serialization of these types.
#pragma once

#include <grpcpp/impl/codegen/proto_utils.h>

#include <cstdint>
#include <optional>

#include "meshrun/proto/rendezvous.pb.h"

namespace meshrun::wire {

// The unknown field that marks a malformed request: the largest field
// number protobuf allows, never used by rendezvous.proto. Its varint value
// is the request's size in bytes.
inline constexpr int kMalformedField = 536870911;

// The size of the request's bytes when it did not parse; nullopt for a
// well-formed request.
inline std::optional<int64_t> MalformedBytes(const google::protobuf::Message& msg) {
  const google::protobuf::UnknownFieldSet& unknown = msg.GetReflection()->GetUnknownFields(msg);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField& f = unknown.field(i);
    if (f.number() == kMalformedField && f.type() == google::protobuf::UnknownField::TYPE_VARINT) {
      return static_cast<int64_t>(f.varint());
    }
  }
  return std::nullopt;
}

// gRPC's serialization for `T`, but a parse failure leaves `T` empty and
// marked (MalformedBytes) instead of failing the call.
template <class T>
class TolerantSerialization {
 public:
  static grpc::Status Serialize(const grpc::protobuf::MessageLite& msg, grpc::ByteBuffer* bb, bool* own_buffer) {
    return grpc::GenericSerialize<grpc::ProtoBufferWriter, T>(msg, bb, own_buffer);
  }
  static grpc::Status Deserialize(grpc::ByteBuffer* buffer, grpc::protobuf::MessageLite* msg) {
    const int64_t size = buffer == nullptr ? 0 : static_cast<int64_t>(buffer->Length());
    grpc::Status s = grpc::GenericDeserialize<grpc::ProtoBufferReader, T>(buffer, msg);
    if (s.ok()) return s;
    auto* full = static_cast<T*>(msg);
    full->Clear();
    full->GetReflection()->MutableUnknownFields(full)->AddVarint(kMalformedField, static_cast<uint64_t>(size));
    return grpc::Status::OK;
  }
};

}  // namespace meshrun::wire

namespace grpc {

#define MESHRUN_TOLERANT_REQUEST(T) \
  template <>                       \
  class SerializationTraits<T, void> : public ::meshrun::wire::TolerantSerialization<T> {};

MESHRUN_TOLERANT_REQUEST(::meshrun::v1::JoinRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::HeartbeatRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::WatchRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::ReportFailureRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::ReportFinishedRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::PlaceReplicaGroupRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::ReplicaGroupStatesRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::KvSetRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::KvGetRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::KvAddRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::KvCompareSetRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::KvCheckRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::KvDeleteRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::KvMultiGetRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::KvMultiSetRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::KvWaitRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::KvKeysRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::KvBatchRequest)
MESHRUN_TOLERANT_REQUEST(::meshrun::v1::StatusRequest)

#undef MESHRUN_TOLERANT_REQUEST

}  // namespace grpc
