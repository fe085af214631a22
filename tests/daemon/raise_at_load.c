// Preloaded (LD_PRELOAD) into aggregatord by start_signals_test: raises the
// signal $RAISE_AT_LOAD names (HUP or TERM) from a shared library's
// initialiser, the window in which a signal used to end the daemon with no
// log line (issue 26 item 17). It takes itself out of the environment first,
// so the daemon's children do not raise it too.
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void RaiseAtLoad(void) {
  const char* name = getenv("RAISE_AT_LOAD");
  const int signo =
      name != NULL && strcmp(name, "TERM") == 0 ? SIGTERM : SIGHUP;
  unsetenv("LD_PRELOAD");
  unsetenv("RAISE_AT_LOAD");
  kill(getpid(), signo);
}
