// TensorBoard's event-file format, written by hand: TFRecord framing (little-endian uint64
// length, masked CRC-32C of those 8 bytes, the data, masked CRC-32C of the data) around `Event`
// protocol buffers. Only the handful of fields TensorBoard needs for scalars and text are
// encoded (tensorboard/compat/proto/{event,summary,tensor}.proto):
//   Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5;
//           SessionLog session_log = 7; }
//   Summary { repeated Value value = 1; }
//   Value { string tag = 1; float simple_value = 2; TensorProto tensor = 8;
//           SummaryMetadata metadata = 9; }
//   SummaryMetadata { PluginData plugin_data = 1; }
//   PluginData { string plugin_name = 1; bytes content = 2; }
//   TensorProto { DataType dtype = 1; TensorShapeProto tensor_shape = 2;
//                 repeated float float_val = 5; repeated bytes string_val = 8; }
//   SessionLog { SessionStatus status = 1; }  (START = 1)
// A library (libprotobuf) would need the .proto files and generated code for these few fields.
// Pure functions: thread safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trainrun::tb {

// Appends protocol-buffer fields (wire format: key = field << 3 | wire type, then the value).
class ProtoWriter {
 public:
  void varint(int field, uint64_t v);             // wire type 0 (int64 as two's complement)
  void float64(int field, double v);              // wire type 1, little-endian IEEE double
  void float32(int field, float v);               // wire type 5, little-endian IEEE float
  void bytes(int field, std::string_view v);      // wire type 2: length, then the bytes
  void message(int field, const ProtoWriter& m);  // wire type 2 around an encoded message
  const std::string& str() const { return out_; }

 private:
  void raw_varint(uint64_t v);
  std::string out_;
};

// Reads the fields of one encoded message in order.
class ProtoReader {
 public:
  explicit ProtoReader(std::string_view msg) : in_(msg) {}
  struct Field {
    int number = 0;
    int wire_type = 0;
    uint64_t value = 0;     // varint, or the bits of a fixed64 / fixed32
    std::string_view data;  // wire type 2
  };
  // The next field, or nullopt at the end; `ok()` tells a clean end from malformed input.
  std::optional<Field> next();
  bool ok() const { return ok_; }

 private:
  std::optional<uint64_t> raw_varint();
  std::nullopt_t fail() {
    ok_ = false;
    return std::nullopt;
  }
  std::string_view in_;
  bool ok_ = true;
};

struct Scalar {
  std::string tag;
  float value;  // TensorBoard's simple_value is a float32
};

// One Event holding every scalar of a metrics row.
std::string scalars_event(double wall_time, int64_t step, const std::vector<Scalar>& values);
// A text summary (the text plugin's scalar string tensor; TensorBoard renders it as Markdown).
std::string text_event(double wall_time, int64_t step, std::string_view tag, std::string_view text);
// A plugin's summary: `content` (the plugin's own encoded message) in the value's metadata, and a
// float 0 as its tensor, as TensorBoard's own plugins write theirs (tb_hparams.h).
std::string plugin_event(double wall_time, int64_t step, std::string_view tag,
                         std::string_view plugin_name, std::string_view content);
// The first record of every file: file_version "brain.Event:2".
std::string file_version_event(double wall_time);
// SessionLog START at `step`: tells a TensorBoard that already read a file to drop what it holds
// at or after `step` from earlier attempts of the run.
std::string session_start_event(double wall_time, int64_t step);

// `data` framed as one TFRecord.
std::string tfrecord(std::string_view data);

struct RecordScan {
  std::vector<std::string_view> records;  // views into the scanned bytes
  size_t valid_bytes = 0;                 // bytes up to the end of the last good record
};
// Splits a file's bytes into records, stopping at the first one cut short or failing its CRCs
// (a write a crash interrupted).
RecordScan scan_tfrecords(std::string_view bytes);

struct EventInfo {
  int64_t step = 0;
  bool file_version = false;  // the header record, no data
};
// The step of an encoded Event (0 when it has none, as in protobuf); nullopt when malformed.
std::optional<EventInfo> event_info(std::string_view event);

}  // namespace trainrun::tb
