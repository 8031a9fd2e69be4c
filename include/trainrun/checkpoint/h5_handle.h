// RAII ownership of HDF5 ids and a way to turn HDF5's error stack into one short reason.
// Shared by src/checkpoint and src/obs (header-only: the two libraries stay independent).
#pragma once

#include <hdf5.h>

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace trainrun::h5 {

// Thrown by check(): carries HDF5's innermost error message. Callers wrap it in an error
// that names the file (CheckpointError, metrics errors).
struct H5Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// HDF5 prints its whole error stack to stderr by default; we report one line instead.
// The setting is per thread in the thread-safe build, so every entry point calls this.
inline void quiet() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

// The innermost (most specific) message of the current error stack, e.g.
// "data error detected by Fletcher32 checksum" or "truncated file: eof = ...".
inline std::string error_reason() {
  std::string reason;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* e, void* out) -> herr_t {
        auto* s = static_cast<std::string*>(out);
        if (n == 0 || s->empty()) {
          if (e->desc && *e->desc)
            *s = e->desc;
          else if (e->func_name)
            *s = std::string(e->func_name) + " failed";
        }
        return 0;
      },
      &reason);
  H5Eclear2(H5E_DEFAULT);
  return reason.empty() ? "unknown HDF5 error" : reason;
}

template <typename T>
T check(T status, const char* what) {
  if (status < 0) throw H5Failure(std::string(what) + ": " + error_reason());
  return status;
}

// One id and the function that releases it.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer, const char* what) : id_(check(id, what)), closer_(closer) {}
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, -1)), closer_(o.closer_) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, -1);
      closer_ = o.closer_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }  // NOLINT: reads naturally in HDF5 calls
  // Closes now and reports a failure (closing a file is where buffered data is written).
  void close(const char* what) {
    hid_t id = std::exchange(id_, -1);
    if (id >= 0) check(closer_(id), what);
  }
  void reset() {
    if (id_ >= 0) closer_(std::exchange(id_, -1));
  }

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

inline Handle file_h(hid_t id, const char* what) {
  return Handle(id, H5Fclose, what);
}
inline Handle group_h(hid_t id, const char* what) {
  return Handle(id, H5Gclose, what);
}
inline Handle dset_h(hid_t id, const char* what) {
  return Handle(id, H5Dclose, what);
}
inline Handle space_h(hid_t id, const char* what) {
  return Handle(id, H5Sclose, what);
}
inline Handle attr_h(hid_t id, const char* what) {
  return Handle(id, H5Aclose, what);
}
inline Handle type_h(hid_t id, const char* what) {
  return Handle(id, H5Tclose, what);
}
inline Handle plist_h(hid_t id, const char* what) {
  return Handle(id, H5Pclose, what);
}

// The names of a group's members, in name order.
inline std::vector<std::string> member_names(hid_t group) {
  H5G_info_t info;
  check(H5Gget_info(group, &info), "list group");
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    ssize_t len = check(
        H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT),
        "list group");
    std::string name(size_t(len) + 1, '\0');
    check(H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name.data(), name.size(),
                             H5P_DEFAULT),
          "list group");
    name.resize(size_t(len));
    names.push_back(std::move(name));
  }
  return names;
}

}  // namespace trainrun::h5
