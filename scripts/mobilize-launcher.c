/* .venv/bin/mobilize: the Python interpreter started with SIGINT and SIGTERM blocked.
 *
 * pip's console script is Python itself, and Python raises KeyboardInterrupt from its own start-up (site, the
 * first imports) before any code of mobilize runs: Ctrl-C in the first ~25 ms printed a traceback (#47 item 7).
 * Blocked signals stay pending across exec; mobilize.core.interrupts.install() unblocks them once its handler is
 * in place, so an interrupt that came during start-up is handled as any other: one line, exit 130.
 * scripts/setup.sh compiles this with PYTHON set to the venv's interpreter (a wheel installed with pip keeps pip's
 * script, whose only difference is that window). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef PYTHON
#error "compile with -DPYTHON='\"/path/to/.venv/bin/python\"'"
#endif

int main(int argc, char **argv) {
    sigset_t blocked;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGINT);
    sigaddset(&blocked, SIGTERM);
    sigprocmask(SIG_BLOCK, &blocked, NULL);
    char **args = calloc((size_t)argc + 3, sizeof(char *));
    if (args == NULL) {
        perror("mobilize");
        return 1;
    }
    args[0] = PYTHON;
    args[1] = "-c";
    args[2] = "import sys; sys.argv[0] = 'mobilize'; from mobilize.cli.main import main; sys.exit(main())";
    for (int i = 1; i < argc; i++) {
        args[i + 2] = argv[i];
    }
    execv(PYTHON, args);
    fprintf(stderr, "mobilize: cannot start %s: %s\n", PYTHON, strerror(errno));
    return 1;
}
