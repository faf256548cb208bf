/* Compiling a user's regular expression (--freeze, --qat-exclude, --lora r=R:REGEX)
 * with bounds checked first.
 *
 * glibc's regcomp() recurses once per nested group and overflows the stack on a few
 * thousand '(' (20,000 crash it), and copies an atom n times for {n}, so nested
 * repetitions grow without bound (((a{255}){255}){255}: 13 s, 3.4 GB).
 * vp_regex_compile() refuses a pattern longer than VP_REGEX_MAX_LEN bytes, nesting
 * groups deeper than VP_REGEX_MAX_DEPTH or expanding past VP_REGEX_MAX_EXPANDED atoms
 * before regcomp sees it, with a message naming the option, then compiles it as POSIX extended
 * (REG_EXTENDED | REG_NOSUB: match or not, no captures). */
#ifndef VP_REGEX_H
#define VP_REGEX_H

#include <regex.h>

#include "ir/vp_status.h"

#define VP_REGEX_MAX_LEN 4096  /* bytes */
#define VP_REGEX_MAX_DEPTH 64  /* nested '(' groups */
#define VP_REGEX_MAX_EXPANDED 100000 /* atoms once {m,n} repetitions are expanded */

/* Compiles pattern into re; option names it in messages ("--freeze").  On success the
 * caller regfree()s re; on failure re is untouched and err says why (VP_ERR_USAGE). */
vp_status vp_regex_compile(regex_t *re, const char *pattern, const char *option, vp_error *err);

#endif
