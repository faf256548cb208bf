/* A user's regular expression bounded before regcomp (vp_regex.h). */
#include "ir/vp_regex.h"

#include <string.h>

/* Deepest group nesting: '(' outside bracket expressions and not escaped. */
static int group_depth(const char *p) {
    int depth = 0, max = 0;
    while (*p) {
        if (*p == '\\') {
            p += p[1] ? 2 : 1;
        } else if (*p == '[') { /* a bracket expression: ']' first is literal, [: :] [. .] [= =] inside */
            p++;
            if (*p == '^') p++;
            if (*p == ']') p++;
            while (*p && *p != ']') {
                if (*p == '[' && (p[1] == ':' || p[1] == '.' || p[1] == '=')) {
                    char close = p[1];
                    p += 2;
                    while (*p && !(*p == close && p[1] == ']')) p++;
                    if (*p) p += 2;
                } else {
                    p++;
                }
            }
            if (*p) p++;
        } else {
            if (*p == '(' && ++depth > max) max = depth;
            if (*p == ')' && depth > 0) depth--;
            p++;
        }
    }
    return max;
}

vp_status vp_regex_compile(regex_t *re, const char *pattern, const char *option, vp_error *err) {
    size_t len = strlen(pattern);
    if (len > VP_REGEX_MAX_LEN)
        return vp_fail(err, VP_ERR_USAGE, "%s: the regular expression is %zu bytes long (at most %d): '%.64s...'",
                       option, len, VP_REGEX_MAX_LEN, pattern);
    int depth = group_depth(pattern);
    if (depth > VP_REGEX_MAX_DEPTH)
        return vp_fail(err, VP_ERR_USAGE, "%s: the regular expression nests groups %d deep (at most %d): '%.64s%s'",
                       option, depth, VP_REGEX_MAX_DEPTH, pattern, len > 64 ? "..." : "");
    regex_t tmp;
    int rc = regcomp(&tmp, pattern, REG_EXTENDED | REG_NOSUB);
    if (rc) {
        char msg[256];
        regerror(rc, &tmp, msg, sizeof msg);
        return vp_fail(err, VP_ERR_USAGE, "%s '%.200s' is not a valid regular expression: %s", option, pattern, msg);
    }
    *re = tmp;
    return VP_OK;
}
