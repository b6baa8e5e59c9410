// Host-side helpers over the HDF5 C API shared by Tessera's HDF5 readers and
// writers: handles closed on scope exit, HDF5's own error printing switched
// off for a scope, and the reason HDF5 gave for the latest failure, so every
// failure becomes one tessera::Error in our words.
#pragma once

#include <hdf5.h>

#include <string>

namespace tessera::impl {

// Closes an HDF5 handle on scope exit (or earlier through close()).
class Hdf5Handle {
 public:
  Hdf5Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Hdf5Handle() { close(); }
  Hdf5Handle(const Hdf5Handle&) = delete;
  Hdf5Handle& operator=(const Hdf5Handle&) = delete;
  Hdf5Handle(Hdf5Handle&& other) noexcept : id_(other.id_), close_(other.close_) { other.id_ = -1; }
  Hdf5Handle& operator=(Hdf5Handle&& other) noexcept {
    if (this != &other) {
      close();
      id_ = other.id_;
      close_ = other.close_;
      other.id_ = -1;
    }
    return *this;
  }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  // Closing a file writes its metadata, so a writer checks this result.
  herr_t close() {
    const herr_t status = id_ >= 0 ? close_(id_) : 0;
    id_ = -1;
    return status;
  }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// Turns off HDF5's printing of its error stack for the lifetime of a scope.
class QuietHdf5 {
 public:
  QuietHdf5() {
    H5Eget_auto2(H5E_DEFAULT, &function_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, function_, data_); }
  QuietHdf5(const QuietHdf5&) = delete;
  QuietHdf5& operator=(const QuietHdf5&) = delete;

 private:
  H5E_auto2_t function_ = nullptr;
  void* data_ = nullptr;
};

// HDF5's description of the innermost error on the current stack (e.g.
// "truncated file: eof = 2048, ..."), or "" when the stack is empty.
inline std::string hdf5_reason() {
  std::string reason;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* error, void* out) -> herr_t {
        if (n == 0 && error->desc) *static_cast<std::string*>(out) = error->desc;
        return 0;
      },
      &reason);
  return reason;
}

// Variable-length UTF-8 strings, which h5py reads as str.
inline Hdf5Handle string_type() {
  Hdf5Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.get(), H5T_VARIABLE);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  return type;
}

}  // namespace tessera::impl
