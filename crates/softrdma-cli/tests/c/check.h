/*
 * For the C tests that stop at their first failed check: CHECK(c) prints the line, the
 * condition and errno, and exits with status 1.
 */
#ifndef SOFTRDMA_CHECK_H
#define SOFTRDMA_CHECK_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                    \
	do {                                                                        \
		if (!(c)) {                                                         \
			fprintf(stderr, "line %d: %s: failed (errno %d: %s)\n",     \
				__LINE__, #c, errno, strerror(errno));              \
			exit(1);                                                    \
		}                                                                   \
	} while (0)

#endif
