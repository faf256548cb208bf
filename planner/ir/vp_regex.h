/* Compiling a user's regular expression (--freeze, --qat-exclude, --lora r=R:REGEX)
 * with bounds checked first.
 *
 * glibc's regcomp() recurses once per nested group and overflows the stack on a few
 * thousand '(' (20,000 crash it).  vp_regex_compile() refuses a pattern longer than
 * VP_REGEX_MAX_LEN bytes or nesting groups deeper than VP_REGEX_MAX_DEPTH before
 * regcomp sees it, with a message naming the option, then compiles it as POSIX extended
 * (REG_EXTENDED | REG_NOSUB: match or not, no captures). */
#ifndef VP_REGEX_H
#define VP_REGEX_H

#include <regex.h>

#include "ir/vp_status.h"

#define VP_REGEX_MAX_LEN 4096  /* bytes */
#define VP_REGEX_MAX_DEPTH 64  /* nested '(' groups */

/* Compiles pattern into re; option names it in messages ("--freeze").  On success the
 * caller regfree()s re; on failure re is untouched and err says why (VP_ERR_USAGE). */
vp_status vp_regex_compile(regex_t *re, const char *pattern, const char *option, vp_error *err);

#endif
