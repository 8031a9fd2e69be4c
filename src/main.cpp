#include <hdf5.h>

#include "trainrun/cli/cli.h"

int main(int argc, char** argv) {
  // Before any other HDF5 call. HDF5 1.10 cannot shut down after a file close that failed (a
  // full disk under metrics.h5): the id stays registered over a half-freed file, and the
  // library's atexit handler dereferences it, so a run that reported its error would still die
  // with SIGSEGV. Every file has an owner that closes it before exit; the OS reclaims the rest.
  // (Checkpoints never reach that state: their space is reserved first, src/checkpoint.)
  H5dont_atexit();
  return trainrun::cli_main(argc, argv);
}
