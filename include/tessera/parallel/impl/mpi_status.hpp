// MPI return codes as errors that name the caller and MPI's own message.
#pragma once

#include <tessera/core/error.hpp>

#include <mpi.h>

#include <string>

namespace tessera::impl {

// Throws Error("<who>: <what> failed: <MPI's text>") unless status is MPI_SUCCESS.
inline void check_mpi(int status, const char* who, const char* what) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  throw Error(std::string(who) + ": " + what + " failed: " + std::string(text, length));
}

}  // namespace tessera::impl
