/* The signals aggregatord takes synchronously, in its signal loop
 * (daemon_runner.cc), and so blocks from its start: one that arrives early
 * waits there instead of ending the process with no log line (issue 26
 * item 17). One list for the three places that block them: the loader-audit
 * module (signals_audit.c, C, before ld.so loads anything), main.cc's
 * .preinit_array and RunDaemon (through kDaemonSignals). */
#ifndef DAEMON_DAEMON_SIGNALS_H_
#define DAEMON_DAEMON_SIGNALS_H_

#include <signal.h>

#define AGGREGATORD_SIGNALS SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGCHLD

#endif /* DAEMON_DAEMON_SIGNALS_H_ */
