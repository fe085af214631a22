// The one Catch2 main shared by every test binary (compiling it takes ~14 s:
// once).
//
// Under a sanitizer Catch2 must not install its POSIX signal handlers: its
// handler catches a SIGSEGV/SIGBUS/SIGABRT first and prints only the test
// case's name, and ASan/TSan then report at most the handler's own malloc.
// Without them the sanitizer's handler prints its report with the stack of
// the fault (and the thread that made it).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define AGGREGATOR_TEST_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define AGGREGATOR_TEST_UNDER_SANITIZER 1
#endif
#endif
#ifdef AGGREGATOR_TEST_UNDER_SANITIZER
#define CATCH_CONFIG_NO_POSIX_SIGNALS
#endif

#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
