// The one Catch2 main shared by every test binary (compiling it takes ~14 s:
// once).
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
