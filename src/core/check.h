// TQ_CHECK: broken invariants (never user input) abort with file and line.
#pragma once
#include <cstdio>
#include <cstdlib>

#define TQ_CHECK(cond)                                                                  \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);    \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

#define TQ_CHECK_MSG(cond, msg)                                                         \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: check failed: %s (%s)\n", __FILE__, __LINE__, #cond, \
                   msg);                                                                \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)
