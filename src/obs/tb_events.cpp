// TensorBoard event records: the protocol-buffer fields of Event and Summary, and TFRecord
// framing with masked CRC-32C.
#include "trainrun/obs/tb_events.h"

#include <cstring>

#include "trainrun/core/crc32c.h"

namespace trainrun::tb {
namespace {

enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// Field numbers, from tensorboard/compat/proto/*.proto.
namespace event {
constexpr int kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kSessionLog = 7;
}
constexpr int kSummaryValue = 1;
namespace value {
constexpr int kTag = 1, kSimpleValue = 2, kTensor = 8, kMetadata = 9;
}
constexpr int kMetadataPluginData = 1, kPluginName = 1, kPluginContent = 2;
namespace tensor {
constexpr int kDtype = 1, kShape = 2, kFloatVal = 5, kStringVal = 8;
constexpr uint64_t kDtFloat = 1, kDtString = 7;  // DataType DT_FLOAT, DT_STRING
}  // namespace tensor
constexpr int kSessionStatus = 1;
constexpr uint64_t kSessionStart = 1;

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

uint64_t get_le(std::string_view in, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(static_cast<unsigned char>(in[i])) << (8 * i);
  return v;
}

ProtoWriter event_header(double wall_time, int64_t step) {
  ProtoWriter e;
  e.float64(event::kWallTime, wall_time);
  if (step != 0) e.varint(event::kStep, static_cast<uint64_t>(step));  // proto3: 0 is absent
  return e;
}

std::string with_summary(ProtoWriter e, const ProtoWriter& summary) {
  e.message(event::kSummary, summary);
  return e.str();
}

}  // namespace

void ProtoWriter::raw_varint(uint64_t v) {
  while (v >= 0x80) {
    out_ += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out_ += static_cast<char>(v);
}

void ProtoWriter::varint(int field, uint64_t v) {
  raw_varint(uint64_t(field) << 3 | kVarint);
  raw_varint(v);
}

void ProtoWriter::float64(int field, double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  raw_varint(uint64_t(field) << 3 | kFixed64);
  put_le(out_, bits, 8);
}

void ProtoWriter::float32(int field, float v) {
  uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  raw_varint(uint64_t(field) << 3 | kFixed32);
  put_le(out_, bits, 4);
}

void ProtoWriter::bytes(int field, std::string_view v) {
  raw_varint(uint64_t(field) << 3 | kLengthDelimited);
  raw_varint(v.size());
  out_.append(v);
}

void ProtoWriter::message(int field, const ProtoWriter& m) {
  bytes(field, m.str());
}

std::optional<uint64_t> ProtoReader::raw_varint() {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && !in_.empty(); shift += 7) {
    const auto b = static_cast<unsigned char>(in_.front());
    in_.remove_prefix(1);
    v |= uint64_t(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
  return std::nullopt;
}

std::optional<ProtoReader::Field> ProtoReader::next() {
  if (in_.empty() || !ok_) return std::nullopt;
  Field f;
  const auto key = raw_varint();
  if (!key) return fail();
  f.number = static_cast<int>(*key >> 3);
  f.wire_type = static_cast<int>(*key & 7);
  const int fixed = f.wire_type == kFixed64 ? 8 : f.wire_type == kFixed32 ? 4 : 0;
  if (f.wire_type == kVarint) {
    const auto v = raw_varint();
    if (!v) return fail();
    f.value = *v;
  } else if (fixed) {
    if (in_.size() < size_t(fixed)) return fail();
    f.value = get_le(in_, fixed);
    in_.remove_prefix(fixed);
  } else if (f.wire_type == kLengthDelimited) {
    const auto n = raw_varint();
    if (!n || *n > in_.size()) return fail();
    f.data = in_.substr(0, *n);
    in_.remove_prefix(*n);
  } else {
    return fail();  // groups (3, 4) are never used by these messages
  }
  return f;
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& values) {
  ProtoWriter summary;
  for (const Scalar& s : values) {
    ProtoWriter v;
    v.bytes(value::kTag, s.tag);
    v.float32(value::kSimpleValue, s.value);
    summary.message(kSummaryValue, v);
  }
  return with_summary(event_header(wall_time, step), summary);
}

std::string text_event(double wall_time, int64_t step, std::string_view tag,
                       std::string_view text) {
  ProtoWriter plugin, metadata, shape, tensor, v, summary;
  plugin.bytes(kPluginName, "text");
  metadata.message(kMetadataPluginData, plugin);
  tensor.varint(tensor::kDtype, tensor::kDtString);
  tensor.message(tensor::kShape, shape);  // no dimensions: a scalar string
  tensor.bytes(tensor::kStringVal, text);
  v.bytes(value::kTag, tag);
  v.message(value::kTensor, tensor);
  v.message(value::kMetadata, metadata);
  summary.message(kSummaryValue, v);
  return with_summary(event_header(wall_time, step), summary);
}

std::string plugin_event(double wall_time, int64_t step, std::string_view tag,
                         std::string_view plugin_name, std::string_view content) {
  ProtoWriter plugin, metadata, shape, tensor, v, summary;
  plugin.bytes(kPluginName, plugin_name);
  plugin.bytes(kPluginContent, content);
  metadata.message(kMetadataPluginData, plugin);
  tensor.varint(tensor::kDtype, tensor::kDtFloat);
  tensor.message(tensor::kShape, shape);
  tensor.float32(tensor::kFloatVal, 0.0f);
  v.bytes(value::kTag, tag);
  v.message(value::kTensor, tensor);
  v.message(value::kMetadata, metadata);
  summary.message(kSummaryValue, v);
  return with_summary(event_header(wall_time, step), summary);
}

std::string file_version_event(double wall_time) {
  ProtoWriter e = event_header(wall_time, 0);
  e.bytes(event::kFileVersion, "brain.Event:2");
  return e.str();
}

std::string session_start_event(double wall_time, int64_t step) {
  ProtoWriter e = event_header(wall_time, step), log;
  log.varint(kSessionStatus, kSessionStart);
  e.message(event::kSessionLog, log);
  return e.str();
}

std::string tfrecord(std::string_view data) {
  std::string out, len;
  put_le(len, data.size(), 8);
  out.reserve(data.size() + 16);
  out += len;
  put_le(out, masked_crc32c(len), 4);
  out.append(data);
  put_le(out, masked_crc32c(data), 4);
  return out;
}

RecordScan scan_tfrecords(std::string_view bytes) {
  RecordScan scan;
  std::string_view rest = bytes;
  while (rest.size() >= 12) {
    const std::string_view len = rest.substr(0, 8);
    if (get_le(rest.substr(8), 4) != masked_crc32c(len)) break;
    const uint64_t n = get_le(len, 8);
    if (rest.size() < 16 || n > rest.size() - 16) break;
    const std::string_view data = rest.substr(12, n);
    if (get_le(rest.substr(12 + n), 4) != masked_crc32c(data)) break;
    scan.records.push_back(data);
    rest.remove_prefix(16 + n);
    scan.valid_bytes = bytes.size() - rest.size();
  }
  return scan;
}

std::optional<EventInfo> event_info(std::string_view event) {
  EventInfo info;
  ProtoReader r(event);
  while (auto f = r.next()) {
    if (f->number == event::kStep && f->wire_type == kVarint)
      info.step = static_cast<int64_t>(f->value);
    else if (f->number == event::kFileVersion && f->wire_type == kLengthDelimited)
      info.file_version = true;
  }
  if (!r.ok()) return std::nullopt;
  return info;
}

}  // namespace trainrun::tb
