// A guard program for tests: what `aggregatord --process-guard` runs, without
// the daemon around it.
#include "lib/process/process_guard.h"

int main(int argc, char** argv) {
  return aggregator::RunProcessGuard(argc, argv);
}
