// Internal to src/checkpoint: a checkpoint's metadata (its root attributes and parameter table),
// the canonical text that formats 2 on store in the checksummed /metadata dataset, and the limits
// outside which a value is absurd. HDF5 attributes carry no checksum; comparing them with that
// text on every read is what makes a flipped bit in `lr_scale` or `step` detectable.
// Pure functions: thread safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainrun/checkpoint/checkpoint.h"

namespace trainrun {

// The root attributes of a checkpoint file (the config text lives in /config).
struct Header {
  TrainState state;  // config_yaml unused here
  int64_t format_version = 0;
  std::string trainrun_version, created;
  int64_t flat_size = 0, param_count = 0;
};

// What a file holds besides the header: the parameter table (sorted by offset), whether the
// optimizer moments are present, and the size of the config text.
struct Layout {
  std::vector<ParamEntry> params;
  bool has_optimizer = false;
  size_t config_bytes = 0;
};

// One `key=value` line per root attribute, in a fixed order, then one line per parameter
// (`param=NAME offset=O shape=[...]`). Doubles in their shortest exact form. Equal inputs give
// equal text; any changed attribute, shape, offset or name changes it.
std::string metadata_record(const Header& h, const Layout& layout);

// The inverse of metadata_record, for the sharded layout's MANIFEST, which holds the record
// itself. "" on success, else the first line that does not parse (a record is checksummed before
// it is parsed: this catches a newer or foreign writer, not damage).
std::string parse_metadata_record(const std::string& text, Header* h, Layout* layout);

// The first line where `actual` (rebuilt from the file's attributes) and `stored` (the
// checksummed copy) differ, as "the file says `A`, /metadata says `B`".
std::string first_difference(const std::string& actual, const std::string& stored);

// "" when every training-state value is one a run can produce; else why not (a negative step or
// counter, world_size below 1, lr_scale outside (0, 1] or not finite).
std::string absurd_value(const Header& h);

}  // namespace trainrun
