/* Minimal recursive-descent JSON reader (RFC 8259 subset good enough for
 * topology files: full syntax, numbers as double, \uXXXX escapes). */
#include "json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct {
    const char *p;
    int line;
    char *err;
    size_t errlen;
    bool failed;
} parser;

static void fail(parser *ps, const char *fmt, ...)
{
    if (ps->failed)
        return;
    ps->failed = true;
    int n = snprintf(ps->err, ps->errlen, "line %d: ", ps->line);
    if (n < 0 || (size_t)n >= ps->errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ps->err + n, ps->errlen - (size_t)n, fmt, ap);
    va_end(ap);
}

/* A character for an error message: itself if printable, else \xNN. */
static const char *show_char(char c, char buf[8])
{
    unsigned char u = (unsigned char)c;
    snprintf(buf, 8, u > 0x20 && u < 0x7f ? "%c" : "\\x%02x", u);
    return buf;
}

static void skip_ws(parser *ps)
{
    for (;;) {
        char c = *ps->p;
        if (c == '\n')
            ps->line++;
        else if (c != ' ' && c != '\t' && c != '\r')
            return;
        ps->p++;
    }
}

static json_value *new_value(parser *ps, json_type type)
{
    json_value *v = calloc(1, sizeof *v);
    if (!v)
        fail(ps, "out of memory");
    else
        v->type = type;
    return v;
}

/* Appends one (key, value) to an array/object; key is NULL for arrays. */
static bool push_item(parser *ps, json_value *v, char *key, json_value *item)
{
    json_value **items = realloc(v->items, (v->count + 1) * sizeof *items);
    if (!items)
        goto oom;
    v->items = items;
    if (v->type == JSON_OBJECT) {
        char **keys = realloc(v->keys, (v->count + 1) * sizeof *keys);
        if (!keys)
            goto oom;
        v->keys = keys;
        v->keys[v->count] = key;
    }
    v->items[v->count++] = item;
    return true;
oom:
    fail(ps, "out of memory");
    return false;
}

static void put_utf8(char *out, size_t *len, unsigned long cp)
{
    if (cp < 0x80) {
        out[(*len)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*len)++] = (char)(0xC0 | (cp >> 6));
        out[(*len)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out[(*len)++] = (char)(0xE0 | (cp >> 12));
        out[(*len)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*len)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        out[(*len)++] = (char)(0xF0 | (cp >> 18));
        out[(*len)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[(*len)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*len)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static bool read_hex4(parser *ps, unsigned long *out)
{
    unsigned long v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *ps->p++;
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (unsigned long)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (unsigned long)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (unsigned long)(c - 'A' + 10);
        else {
            fail(ps, "bad \\u escape");
            return false;
        }
    }
    *out = v;
    return true;
}

/* Parses a string literal starting at the opening quote; returns a malloc'd
 * UTF-8 copy. Escapes never make the text longer, so the raw length bounds it. */
static char *parse_string(parser *ps)
{
    const char *start = ++ps->p;
    const char *end = start;
    while (*end && *end != '"') {
        if (*end == '\\' && end[1])
            end++;
        end++;
    }
    if (!*end) {
        fail(ps, "unterminated string");
        return NULL;
    }
    char *out = malloc((size_t)(end - start) + 1);
    if (!out) {
        fail(ps, "out of memory");
        return NULL;
    }
    size_t len = 0;
    while (*ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p++;
        if (c < 0x20) {
            fail(ps, "control character in string");
            goto bad;
        }
        if (c != '\\') {
            out[len++] = (char)c;
            continue;
        }
        char e = *ps->p++;
        switch (e) {
        case '"': out[len++] = '"'; break;
        case '\\': out[len++] = '\\'; break;
        case '/': out[len++] = '/'; break;
        case 'b': out[len++] = '\b'; break;
        case 'f': out[len++] = '\f'; break;
        case 'n': out[len++] = '\n'; break;
        case 'r': out[len++] = '\r'; break;
        case 't': out[len++] = '\t'; break;
        case 'u': {
            unsigned long cp, lo;
            if (!read_hex4(ps, &cp))
                goto bad;
            /* A surrogate pair takes 12 input bytes and gives 4 output bytes. */
            if (cp >= 0xD800 && cp < 0xDC00 && ps->p[0] == '\\' && ps->p[1] == 'u') {
                ps->p += 2;
                if (!read_hex4(ps, &lo))
                    goto bad;
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    fail(ps, "bad surrogate pair");
                    goto bad;
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            put_utf8(out, &len, cp);
            break;
        }
        default: {
            char shown[8];
            fail(ps, "bad escape '\\%s'", show_char(e, shown));
            goto bad;
        }
        }
    }
    ps->p++; /* closing quote */
    out[len] = '\0';
    return out;
bad:
    free(out);
    return NULL;
}

static json_value *parse_value(parser *ps, int depth);

static json_value *parse_container(parser *ps, int depth, bool is_object)
{
    json_value *v = new_value(ps, is_object ? JSON_OBJECT : JSON_ARRAY);
    if (!v)
        return NULL;
    char close = is_object ? '}' : ']';
    ps->p++;
    skip_ws(ps);
    if (*ps->p == close) {
        ps->p++;
        return v;
    }
    for (;;) {
        char *key = NULL;
        skip_ws(ps);
        if (is_object) {
            if (*ps->p != '"') {
                fail(ps, "expected a member name in quotes");
                goto bad;
            }
            key = parse_string(ps);
            if (!key)
                goto bad;
            skip_ws(ps);
            if (*ps->p != ':') {
                free(key);
                fail(ps, "expected ':'");
                goto bad;
            }
            ps->p++;
        }
        json_value *item = parse_value(ps, depth + 1);
        if (!item || !push_item(ps, v, key, item)) {
            free(key);
            json_free(item);
            goto bad;
        }
        skip_ws(ps);
        if (*ps->p == ',') {
            ps->p++;
            continue;
        }
        if (*ps->p == close) {
            ps->p++;
            return v;
        }
        fail(ps, "expected ',' or '%c'", close);
        goto bad;
    }
bad:
    json_free(v);
    return NULL;
}

static json_value *parse_number(parser *ps)
{
    /* Validate JSON number syntax, then let strtod convert it. */
    const char *s = ps->p;
    if (*s == '-')
        s++;
    if (*s == '0')
        s++;
    else if (*s >= '1' && *s <= '9')
        while (*s >= '0' && *s <= '9')
            s++;
    else
        goto bad;
    if (*s == '.') {
        s++;
        if (!(*s >= '0' && *s <= '9'))
            goto bad;
        while (*s >= '0' && *s <= '9')
            s++;
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-')
            s++;
        if (!(*s >= '0' && *s <= '9'))
            goto bad;
        while (*s >= '0' && *s <= '9')
            s++;
    }
    json_value *v = new_value(ps, JSON_NUMBER);
    if (v)
        v->number = strtod(ps->p, NULL);
    ps->p = s;
    return v;
bad:
    fail(ps, "bad number");
    return NULL;
}

static bool match_word(parser *ps, const char *word)
{
    size_t n = strlen(word);
    if (strncmp(ps->p, word, n) != 0)
        return false;
    ps->p += n;
    return true;
}

static json_value *parse_value(parser *ps, int depth)
{
    if (depth > MAX_DEPTH) {
        fail(ps, "nested too deeply");
        return NULL;
    }
    skip_ws(ps);
    char c = *ps->p;
    json_value *v;
    switch (c) {
    case '{':
    case '[':
        return parse_container(ps, depth, c == '{');
    case '"': {
        char *s = parse_string(ps);
        if (!s)
            return NULL;
        v = new_value(ps, JSON_STRING);
        if (!v)
            free(s);
        else
            v->string = s;
        return v;
    }
    case '\0':
        fail(ps, "unexpected end of input");
        return NULL;
    default:
        break;
    }
    if (c == '-' || (c >= '0' && c <= '9'))
        return parse_number(ps);
    if (match_word(ps, "null"))
        return new_value(ps, JSON_NULL);
    bool is_true = match_word(ps, "true");
    if (is_true || match_word(ps, "false")) {
        v = new_value(ps, JSON_BOOL);
        if (v)
            v->boolean = is_true;
        return v;
    }
    char shown[8];
    fail(ps, "unexpected character '%s'", show_char(c, shown));
    return NULL;
}

json_value *json_parse(const char *text, char *err, size_t errlen)
{
    parser ps = {.p = text, .line = 1, .err = err, .errlen = errlen};
    if (errlen)
        err[0] = '\0';
    json_value *v = parse_value(&ps, 0);
    if (v) {
        skip_ws(&ps);
        if (*ps.p) {
            fail(&ps, "trailing characters after the document");
            json_free(v);
            v = NULL;
        }
    }
    return v;
}

void json_free(json_value *value)
{
    if (!value)
        return;
    for (size_t i = 0; i < value->count; i++) {
        json_free(value->items[i]);
        if (value->keys)
            free(value->keys[i]);
    }
    free(value->items);
    free(value->keys);
    free(value->string);
    free(value);
}

const json_value *json_get(const json_value *obj, const char *key)
{
    if (!obj || obj->type != JSON_OBJECT)
        return NULL;
    /* Last one wins on duplicate keys, like most JSON readers. */
    for (size_t i = obj->count; i-- > 0;)
        if (strcmp(obj->keys[i], key) == 0)
            return obj->items[i];
    return NULL;
}

const char *json_type_name(json_type type)
{
    static const char *const names[] = {"null", "a boolean", "a number",
                                        "a string", "an array", "an object"};
    return names[type];
}
