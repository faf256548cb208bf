#include "onnx/tensor_proto.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ir/atomic_file.h"
#include "ir/file_read.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "raw_data is little-endian; so must we be");

vp_status vp_read_file(const char *path, uint8_t **buf, size_t *len, vp_error *err) {
    int fd = vp_file_open_regular(path, err); /* a FIFO or a directory is refused, never waited on */
    if (fd < 0) return VP_ERR_IO;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return vp_fail(err, VP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return vp_fail(err, VP_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    }
    size_t n = (size_t)st.st_size;
    uint8_t *p = malloc(n ? n : 1);
    if (!p) {
        fclose(f);
        return vp_fail(err, VP_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    if (n && fread(p, 1, n, f) != n) {
        free(p);
        fclose(f);
        return vp_fail(err, VP_ERR_IO, "%s: short read", path);
    }
    fclose(f);
    *buf = p;
    *len = n;
    return VP_OK;
}

static int find_or_map(vp_graph *g, const char *path, uint8_t **base, size_t *len, vp_error *err,
                       const char *what) {
    /* one mapping per external file, remembered by path in the graph's mapping list */
    for (int i = 0; i < g->n_mappings; i++)
        if (!strcmp(g->mappings[i].path, path)) {
            *base = g->mappings[i].addr;
            *len = g->mappings[i].len;
            return 1;
        }
    int fd = vp_file_open_regular(path, err); /* a FIFO is refused, never waited on */
    if (fd < 0) {
        vp_error_prefix(err, "%s: external data file ", what);
        return 0;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        vp_fail(err, VP_ERR_IO, "%s: external data file %s: cannot stat: %s", what, path, strerror(errno));
        return 0;
    }
    size_t n = (size_t)st.st_size;
    void *addr = n ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
    close(fd);
    if (n && addr == MAP_FAILED) {
        vp_fail(err, VP_ERR_IO, "%s: cannot map external data '%s': %s", what, path, strerror(errno));
        return 0;
    }
    if (addr) {
        vp_mapping *m = realloc(g->mappings, (size_t)(g->n_mappings + 1) * sizeof *m);
        if (!m) {
            munmap(addr, n);
            vp_fail(err, VP_ERR_NOMEM, "out of memory");
            return 0;
        }
        g->mappings = m;
        g->mappings[g->n_mappings].path = strdup(path);
        g->mappings[g->n_mappings].addr = addr;
        g->mappings[g->n_mappings].len = n;
        g->n_mappings++;
    }
    *base = addr;
    *len = n;
    return 1;
}

static int parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s) return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || s[0] == '-') return 0;
    *out = v;
    return 1;
}

/* The location after its symlinks are resolved must still lie inside the model's folder
 * (resolved too): a link beside the model pointing at /etc/passwd is refused as "../" is. */
static vp_status inside_model_folder(const char *base_dir, const char *path, const char *location,
                                     const char *what, vp_error *err) {
    char *dir = realpath(base_dir, NULL);
    if (!dir) return vp_fail(err, VP_ERR_IO, "%s: model folder '%s' cannot be resolved: %s", what, base_dir, strerror(errno));
    char *real = realpath(path, NULL);
    if (!real) {
        int e = errno;
        free(dir);
        return vp_fail(err, VP_ERR_IO, "%s: external data file %s: cannot open: %s", what, path, strerror(e));
    }
    size_t n = strlen(dir);
    /* "/" as the model's folder: every absolute path is inside it */
    int inside = !strncmp(real, dir, n) && (real[n] == '/' || (n == 1 && dir[0] == '/')) && real[n] != 0;
    vp_status s = inside ? VP_OK
                         : vp_fail(err, VP_ERR_INVALID,
                                   "%s: external data location '%s' resolves to '%s', outside the model's folder '%s' "
                                   "(through a symbolic link)",
                                   what, location, real, dir);
    free(real);
    free(dir);
    return s;
}

static vp_status external_bytes(const Onnx__TensorProto *tp, const vp_extdata_ctx *ext,
                                const char *what, size_t want, const uint8_t **bytes, vp_error *err) {
    if (!ext)
        return vp_fail(err, VP_ERR_UNSUPPORTED, "%s: external data is not allowed here", what);
    const char *location = NULL;
    uint64_t offset = 0, length = want;
    int has_length = 0;
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *e = tp->external_data[i];
        if (!e->key) continue;
        if (!strcmp(e->key, "location")) location = e->value;
        else if (!strcmp(e->key, "offset")) {
            if (!parse_u64(e->value, &offset))
                return vp_fail(err, VP_ERR_INVALID, "%s: external data offset '%s' is not a number",
                               what, e->value ? e->value : "");
        } else if (!strcmp(e->key, "length")) {
            if (!parse_u64(e->value, &length))
                return vp_fail(err, VP_ERR_INVALID, "%s: external data length '%s' is not a number",
                               what, e->value ? e->value : "");
            has_length = 1;
        }
    }
    if (!location || !*location)
        return vp_fail(err, VP_ERR_INVALID, "%s: external data has no location", what);
    if (location[0] == '/' || strstr(location, ".."))
        return vp_fail(err, VP_ERR_INVALID,
                       "%s: external data location '%s' must be a relative path inside the model's folder",
                       what, location);
    if (has_length && length != want)
        return vp_fail(err, VP_ERR_INVALID, "%s: external data length %llu does not match the %zu bytes its shape needs",
                       what, (unsigned long long)length, want);
    if (!ext->base_dir)
        return vp_fail(err, VP_ERR_UNSUPPORTED, "%s: external data is not allowed here (no model folder)", what);
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", ext->base_dir, location) >= (int)sizeof path)
        return vp_fail(err, VP_ERR_INVALID, "%s: external data location '%s' is too long", what, location);
    vp_status ps = inside_model_folder(ext->base_dir, path, location, what, err);
    if (ps) return ps;
    uint8_t *base;
    size_t len;
    if (!find_or_map(ext->g, path, &base, &len, err, what)) return VP_ERR_IO;
    if (offset > len || want > len - offset)
        return vp_fail(err, VP_ERR_IO, "%s: external data '%s' holds %zu bytes, needs %llu at offset %llu",
                       what, path, len, (unsigned long long)want, (unsigned long long)offset);
    *bytes = base ? base + offset : NULL;
    return VP_OK;
}

static uint16_t u16_of(int32_t v) { return (uint16_t)(v & 0xffff); }

vp_status vp_tensor_from_proto(const Onnx__TensorProto *tp, const vp_extdata_ctx *ext,
                               const char *what, vp_tensor *out, vp_data_owner *owner,
                               vp_error *err) {
    memset(out, 0, sizeof *out);
    *owner = VP_DATA_NONE;
    vp_dtype dt = (vp_dtype)tp->data_type;
    size_t es = vp_dtype_size(dt);
    if (dt == VP_STRING) return vp_fail(err, VP_ERR_UNSUPPORTED, "%s: string tensors are not supported", what);
    if (!es || dt == VP_C64 || dt == VP_C128)
        return vp_fail(err, VP_ERR_UNSUPPORTED, "%s: data type %d is not supported", what, tp->data_type);
    if (tp->segment) return vp_fail(err, VP_ERR_UNSUPPORTED, "%s: segmented tensors are not supported", what);
    if (tp->n_dims > VP_MAX_RANK)
        return vp_fail(err, VP_ERR_UNSUPPORTED, "%s: rank %zu exceeds %d", what, tp->n_dims, VP_MAX_RANK);
    int64_t numel = 1;
    for (size_t d = 0; d < tp->n_dims; d++) {
        int64_t v = tp->dims[d];
        if (v < 0) return vp_fail(err, VP_ERR_INVALID, "%s: negative dim %lld", what, (long long)v);
        if (v && numel > (INT64_MAX / (int64_t)es) / v)
            return vp_fail(err, VP_ERR_INVALID, "%s: shape overflows", what);
        numel *= v;
        out->dims[d] = v;
    }
    out->rank = (int)tp->n_dims;
    out->dtype = dt;
    size_t nbytes = (size_t)numel * es;

    const uint8_t *raw = NULL;
    int have_raw = 0;
    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        vp_status s = external_bytes(tp, ext, what, nbytes, &raw, err);
        if (s) return s;
        have_raw = 1;
    } else if (tp->has_raw_data) {
        if (tp->raw_data.len != nbytes)
        {
            char sh[256];
            return vp_fail(err, VP_ERR_INVALID, "%s: raw_data holds %zu bytes, %s %s needs %zu", what,
                           tp->raw_data.len, vp_dtype_name(dt), vp_shape_str(out->rank, out->dims, sh, sizeof sh),
                           nbytes);
        }
        raw = tp->raw_data.data;
        have_raw = 1;
    }
    if (numel == 0) return VP_OK;
    if (have_raw) {
        if (((uintptr_t)raw % es) == 0) {
            out->data = (void *)raw;
            *owner = VP_DATA_BORROWED;
        } else {
            out->data = malloc(nbytes);
            if (!out->data) return vp_fail(err, VP_ERR_NOMEM, "%s: out of memory", what);
            memcpy(out->data, raw, nbytes);
            *owner = VP_DATA_HEAP;
        }
        return VP_OK;
    }

    size_t have;
    switch (dt) {
    case VP_F32: have = tp->n_float_data; break;
    case VP_F64: have = tp->n_double_data; break;
    case VP_I64: have = tp->n_int64_data; break;
    case VP_U32: case VP_U64: have = tp->n_uint64_data; break;
    default: have = tp->n_int32_data; break;
    }
    if (have != (size_t)numel)
        return vp_fail(err, VP_ERR_INVALID, "%s: holds %zu values, its shape needs %lld", what, have,
                       (long long)numel);
    if (dt == VP_F32 || dt == VP_F64 || dt == VP_I64 || dt == VP_U64) {
        out->data = dt == VP_F32 ? (void *)tp->float_data
                  : dt == VP_F64 ? (void *)tp->double_data
                  : dt == VP_I64 ? (void *)tp->int64_data : (void *)tp->uint64_data;
        *owner = VP_DATA_BORROWED;
        return VP_OK;
    }
    void *p = malloc(nbytes);
    if (!p) return vp_fail(err, VP_ERR_NOMEM, "%s: out of memory", what);
    for (int64_t i = 0; i < numel; i++) {
        switch (dt) {
        case VP_I32: ((int32_t *)p)[i] = tp->int32_data[i]; break;
        case VP_U32: ((uint32_t *)p)[i] = (uint32_t)tp->uint64_data[i]; break;
        case VP_I16: ((int16_t *)p)[i] = (int16_t)tp->int32_data[i]; break;
        case VP_U16: case VP_F16: case VP_BF16: ((uint16_t *)p)[i] = u16_of(tp->int32_data[i]); break;
        case VP_I8: ((int8_t *)p)[i] = (int8_t)tp->int32_data[i]; break;
        case VP_U8: ((uint8_t *)p)[i] = (uint8_t)tp->int32_data[i]; break;
        case VP_BOOL: ((uint8_t *)p)[i] = tp->int32_data[i] != 0; break;
        default: free(p); return vp_fail(err, VP_ERR_UNSUPPORTED, "%s: unsupported storage", what);
        }
    }
    out->data = p;
    *owner = VP_DATA_HEAP;
    return VP_OK;
}

vp_status vp_tensor_read_pb(const char *path, vp_tensor *out, char **name_out, vp_error *err) {
    uint8_t *buf;
    size_t len;
    vp_status s = vp_read_file(path, &buf, &len, err);
    if (s) return s;
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(NULL, len, buf);
    free(buf);
    if (!tp) return vp_fail(err, VP_ERR_PARSE, "%s: not a valid TensorProto (truncated or corrupt)", path);
    vp_data_owner owner;
    char what[4200];
    snprintf(what, sizeof what, "%s", path);
    s = vp_tensor_from_proto(tp, NULL, what, out, &owner, err);
    if (s == VP_OK && owner == VP_DATA_BORROWED) {
        size_t n = vp_tensor_nbytes(out);
        void *copy = malloc(n ? n : 1);
        if (!copy) s = vp_fail(err, VP_ERR_NOMEM, "%s: out of memory", path);
        else memcpy(copy, out->data, n);
        out->data = copy;
    } else if (s == VP_OK && owner == VP_DATA_NONE) {
        out->data = malloc(1);
    }
    if (s == VP_OK && name_out) {
        *name_out = strdup(tp->name ? tp->name : "");
    }
    onnx__tensor_proto__free_unpacked(tp, NULL);
    return s;
}

vp_status vp_tensor_write_pb(const char *path, const vp_tensor *t, const char *name, vp_error *err) {
    Onnx__TensorProto tp = ONNX__TENSOR_PROTO__INIT;
    int64_t dims[VP_MAX_RANK];
    for (int i = 0; i < t->rank; i++) dims[i] = t->dims[i];
    tp.n_dims = (size_t)t->rank;
    tp.dims = dims;
    tp.has_data_type = 1;
    tp.data_type = (int32_t)t->dtype;
    tp.name = (char *)(name ? name : "");
    tp.has_raw_data = 1;
    tp.raw_data.len = vp_tensor_nbytes(t);
    tp.raw_data.data = t->data;
    size_t n = onnx__tensor_proto__get_packed_size(&tp);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) return vp_fail(err, VP_ERR_NOMEM, "out of memory writing %s", path);
    onnx__tensor_proto__pack(&tp, buf);
    vp_atomic_file af;
    vp_status s = vp_atomic_file_open(&af, path, err);
    if (!s) {
        fwrite(buf, 1, n, af.f);
        s = vp_atomic_file_commit(&af, err);
    }
    free(buf);
    return s;
}
