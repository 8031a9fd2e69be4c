#include "trainrun/cli.h"

int main(int argc, char** argv) {
  return trainrun::cli_main(argc, argv);
}
