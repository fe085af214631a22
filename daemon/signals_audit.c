/* libaggregatord_signals.so: aggregatord's loader-audit module. The binary
 * names it in DT_AUDIT as $ORIGIN/libaggregatord_signals.so (daemon/BUILD), so
 * ld.so loads it from beside the binary and calls la_version before it loads
 * or relocates any other object: the daemon's signals are blocked from there
 * on, and a SIGHUP or SIGTERM in ld.so's own work (a few ms; issue 26 item 17)
 * stays pending for the signal loop instead of ending the daemon.
 *
 * la_version returns 0, which tells ld.so not to audit anything: it unloads the
 * module again and goes on as without it (glibc's rtld: "this can happen
 * deliberately"; only LD_DEBUG=files says so). The signal mask stays. Where
 * ld.so does not load it (missing beside the binary, a secure-exec start, the
 * sanitizer builds), daemon/main.cc's .preinit_array blocks the same signals
 * (daemon_signals.h), once ld.so has loaded and relocated the libraries.
 *
 * No libc: ld.so loads it into a namespace of its own before libc exists
 * anywhere, so it is linked -nostdlib with no undefined symbol, and makes the
 * system call itself. */
#include <stdint.h>
#include <sys/syscall.h>

#include "daemon/daemon_signals.h"

static void BlockSignals(const uint64_t* mask) {
  /* rt_sigprocmask(SIG_BLOCK, mask, NULL, sizeof(kernel sigset_t)). */
#if defined(__x86_64__)
  register long size __asm__("r10") = sizeof(*mask);
  long result;
  __asm__ volatile("syscall"
                   : "=a"(result)
                   : "a"(SYS_rt_sigprocmask), "D"(SIG_BLOCK), "S"(mask), "d"(0),
                     "r"(size)
                   : "rcx", "r11", "memory");
  (void)result; /* nothing to do about a failure this early */
#elif defined(__aarch64__)
  register long number __asm__("x8") = SYS_rt_sigprocmask;
  register long how __asm__("x0") = SIG_BLOCK;
  register long set __asm__("x1") = (long)mask;
  register long old __asm__("x2") = 0;
  register long size __asm__("x3") = sizeof(*mask);
  __asm__ volatile("svc 0"
                   : "+r"(how)
                   : "r"(number), "r"(set), "r"(old), "r"(size)
                   : "memory");
#else
#error "signals_audit.c: no raw system call for this architecture"
#endif
}

__attribute__((visibility("default"))) unsigned int la_version(
    unsigned int version) {
  static const int kSignals[] = {AGGREGATORD_SIGNALS};
  uint64_t mask = 0; /* the kernel's sigset_t: one bit per signal */
  for (unsigned i = 0; i < sizeof(kSignals) / sizeof(kSignals[0]); ++i) {
    mask |= (uint64_t)1 << (kSignals[i] - 1);
  }
  BlockSignals(&mask);
  (void)version;
  return 0; /* audit nothing: ld.so unloads this module */
}
