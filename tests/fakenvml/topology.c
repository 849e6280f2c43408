/* Reads and validates the fake GPU topology JSON (see README.md). */
#define _GNU_SOURCE
#include "topology.h"
#include "json.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bind dladdr to its oldest symbol version so the library still loads in
 * containers whose glibc predates 2.34 (where dladdr moved into libc). */
#if defined(__GLIBC__) && defined(__x86_64__)
__asm__(".symver dladdr,dladdr@GLIBC_2.2.5");
#elif defined(__GLIBC__) && defined(__aarch64__)
__asm__(".symver dladdr,dladdr@GLIBC_2.17");
#endif

#define MAX_FILE_BYTES (16u << 20)
#define NO_MINOR UINT_MAX

typedef struct {
    const char *tag;
    const char *path;
    bool ok;
} loader;

/* Reports the first problem only; later ones are usually consequences. */
static void bad(loader *ld, const char *where, const char *fmt, ...)
{
    if (!ld->ok)
        return;
    ld->ok = false;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: malformed topology %s: %s%s%s\n", ld->tag, ld->path,
            where, *where ? ": " : "", msg);
}

/* The member `key` when present, not null and of type `want`. */
static const json_value *field(loader *ld, const json_value *obj, const char *where,
                               const char *key, json_type want)
{
    const json_value *v = json_get(obj, key);
    if (!v || v->type == JSON_NULL)
        return NULL;
    if (v->type != want) {
        bad(ld, where, "\"%s\" must be %s, not %s", key, json_type_name(want),
            json_type_name(v->type));
        return NULL;
    }
    return v;
}

static unsigned long long get_uint(loader *ld, const json_value *obj, const char *where,
                                   const char *key, unsigned long long def,
                                   unsigned long long max)
{
    const json_value *v = field(ld, obj, where, key, JSON_NUMBER);
    if (!v)
        return def;
    double d = v->number;
    if (d < 0 || d > (double)max || (double)(unsigned long long)d != d) {
        bad(ld, where, "\"%s\" must be an integer from 0 to %llu", key, max);
        return def;
    }
    return (unsigned long long)d;
}

/* Like get_uint, but also takes a hex string such as "0x20B010DE". */
static unsigned get_uint32_or_hex(loader *ld, const json_value *obj, const char *where,
                                  const char *key, unsigned def)
{
    const json_value *v = json_get(obj, key);
    if (!v || v->type != JSON_STRING)
        return (unsigned)get_uint(ld, obj, where, key, def, UINT32_MAX);
    char *end;
    errno = 0;
    unsigned long n = strtoul(v->string, &end, 16);
    if (errno || end == v->string || *end || n > UINT32_MAX) {
        bad(ld, where, "\"%s\" must be an integer or a hex string", key);
        return def;
    }
    return (unsigned)n;
}

static bool get_bool(loader *ld, const json_value *obj, const char *where,
                     const char *key, bool def)
{
    const json_value *v = field(ld, obj, where, key, JSON_BOOL);
    return v ? v->boolean : def;
}

/* Copies a string member into buf; returns false when absent. */
static bool get_string(loader *ld, const json_value *obj, const char *where,
                       const char *key, char *buf, size_t size)
{
    const json_value *v = field(ld, obj, where, key, JSON_STRING);
    if (!v)
        return false;
    if (!v->string[0] || strlen(v->string) >= size) {
        bad(ld, where, "\"%s\" must be a non-empty string shorter than %zu bytes", key, size);
        return false;
    }
    strcpy(buf, v->string);
    return true;
}

static void load_processes(loader *ld, const json_value *obj, const char *where,
                           const char *key, fk_process_list *out)
{
    const json_value *list = field(ld, obj, where, key, JSON_ARRAY);
    if (!list)
        return;
    if (list->count > FK_MAX_PROCS) {
        bad(ld, where, "at most %d \"%s\"", FK_MAX_PROCS, key);
        return;
    }
    for (size_t i = 0; i < list->count; i++) {
        char at[96];
        snprintf(at, sizeof at, "%s.%s[%zu]", where, key, i);
        const json_value *p = list->items[i];
        if (p->type != JSON_OBJECT) {
            bad(ld, at, "must be an object");
            return;
        }
        if (!json_get(p, "pid"))
            bad(ld, at, "\"pid\" is required");
        out->list[i].pid = (unsigned)get_uint(ld, p, at, "pid", 0, UINT32_MAX);
        out->list[i].used_memory_mib = get_uint(ld, p, at, "used_memory_mib", 0, 1ull << 40);
        get_string(ld, p, at, "name", out->list[i].name, sizeof out->list[i].name);
    }
    out->count = (unsigned)list->count;
}

static void load_mig(loader *ld, const json_value *obj, const char *where,
                     const fk_gpu *gpu, unsigned index, fk_mig *mig)
{
    if (obj->type != JSON_OBJECT) {
        bad(ld, where, "must be an object");
        return;
    }
    if (!get_string(ld, obj, where, "uuid", mig->uuid, sizeof mig->uuid))
        snprintf(mig->uuid, sizeof mig->uuid, "MIG-%.8s-0000-4000-8000-%012x",
                 strlen(gpu->uuid) > 4 ? gpu->uuid + 4 : gpu->uuid, index);
    get_string(ld, obj, where, "profile", mig->profile, sizeof mig->profile);
    unsigned long long def_mem = gpu->memory_total_mib / 7;
    mig->memory_total_mib = get_uint(ld, obj, where, "memory_total_mib", def_mem, 1ull << 30);
    mig->memory_used_mib = get_uint(ld, obj, where, "memory_used_mib", 0, mig->memory_total_mib);
    unsigned long long def_mp = gpu->memory_total_mib
        ? gpu->multiprocessor_count * mig->memory_total_mib / gpu->memory_total_mib : 1;
    mig->multiprocessor_count = (unsigned)get_uint(ld, obj, where, "multiprocessor_count",
                                                   def_mp ? def_mp : 1, 100000);
    mig->gpu_instance_id = (unsigned)get_uint(ld, obj, where, "gpu_instance_id", index + 1, 1000);
    mig->compute_instance_id = (unsigned)get_uint(ld, obj, where, "compute_instance_id", 0, 1000);
    load_processes(ld, obj, where, "processes", &mig->processes);
}

/* "events": [{"type": "xid" | "double_bit_ecc" | "gpu_lost", "xid": 13,
 * "gpu_instance_id": 1, "compute_instance_id": 0}]: what nvmlEventSetWait delivers. */
static void load_events(loader *ld, const json_value *obj, const char *where, fk_gpu *gpu)
{
    const json_value *events = field(ld, obj, where, "events", JSON_ARRAY);
    if (events && events->count > FK_MAX_EVENTS) {
        bad(ld, where, "at most %d \"events\"", FK_MAX_EVENTS);
        return;
    }
    for (size_t i = 0; events && i < events->count; i++) {
        const json_value *item = events->items[i];
        char at[96], type[32] = "";
        snprintf(at, sizeof at, "%s.events[%zu]", where, i);
        if (item->type != JSON_OBJECT || !get_string(ld, item, at, "type", type, sizeof type)) {
            bad(ld, at, "must be an object with a \"type\"");
            continue;
        }
        fk_event *event = &gpu->events[gpu->event_count++];
        event->type = strcmp(type, "double_bit_ecc") == 0 ? 0x2 : 0x8;
        if (strcmp(type, "xid") && strcmp(type, "double_bit_ecc") && strcmp(type, "gpu_lost"))
            bad(ld, at, "unknown \"type\" \"%s\" (xid, double_bit_ecc, gpu_lost)", type);
        /* A GPU that fell off the bus is Xid 79 to NVML. */
        event->data = get_uint(ld, item, at, "xid", strcmp(type, "gpu_lost") ? 0 : 79, 1u << 20);
        event->gpu_instance_id =
            (unsigned)get_uint(ld, item, at, "gpu_instance_id", 0xFFFFFFFFu, 0xFFFFFFFFu);
        event->compute_instance_id =
            (unsigned)get_uint(ld, item, at, "compute_instance_id", 0xFFFFFFFFu, 0xFFFFFFFFu);
    }
}

static void load_gpu(loader *ld, const json_value *obj, const char *where,
                     unsigned position, fk_gpu *gpu)
{
    if (obj->type != JSON_OBJECT) {
        bad(ld, where, "must be an object");
        return;
    }
    char bus_id[64] = "";
    if (get_string(ld, obj, where, "pci_bus_id", bus_id, sizeof bus_id)) {
        if (!fk_parse_pci(bus_id, &gpu->pci))
            bad(ld, where, "bad \"pci_bus_id\" \"%s\" (want e.g. \"00000000:81:00.0\")", bus_id);
    } else {
        gpu->pci.bus = position + 1; /* default: one GPU per bus, in file order */
    }
    if (!get_string(ld, obj, where, "uuid", gpu->uuid, sizeof gpu->uuid))
        snprintf(gpu->uuid, sizeof gpu->uuid, "GPU-%08x-0000-4000-8000-%04x%02x%02x%02x00",
                 0xfa4e0000u + position, gpu->pci.domain & 0xffff, gpu->pci.bus,
                 gpu->pci.device, gpu->pci.function);
    if (!get_string(ld, obj, where, "name", gpu->name, sizeof gpu->name))
        strcpy(gpu->name, "NVIDIA Fake GPU");

    gpu->pci_device_id = get_uint32_or_hex(ld, obj, where, "pci_device_id", 0x1FFF10DE);
    gpu->pci_subsystem_id = get_uint32_or_hex(ld, obj, where, "pci_subsystem_id", 0);
    gpu->memory_total_mib = get_uint(ld, obj, where, "memory_total_mib", 16384, 1ull << 30);
    gpu->memory_used_mib = get_uint(ld, obj, where, "memory_used_mib", 0, gpu->memory_total_mib);
    gpu->cuda_memory_total_mib = get_uint(ld, obj, where, "cuda_memory_total_mib",
                                          gpu->memory_total_mib, gpu->memory_total_mib);

    gpu->cc_major = 8;
    gpu->cc_minor = 0;
    const json_value *cc = field(ld, obj, where, "compute_capability", JSON_ARRAY);
    if (cc) {
        if (cc->count != 2 || cc->items[0]->type != JSON_NUMBER ||
            cc->items[1]->type != JSON_NUMBER || cc->items[0]->number < 1 ||
            cc->items[0]->number > 99 || cc->items[1]->number < 0 || cc->items[1]->number > 9)
            bad(ld, where, "\"compute_capability\" must be [major, minor], e.g. [8, 6]");
        else {
            gpu->cc_major = (int)cc->items[0]->number;
            gpu->cc_minor = (int)cc->items[1]->number;
        }
    }

    gpu->utilization_gpu = (unsigned)get_uint(ld, obj, where, "utilization_gpu_percent", 0, 100);
    gpu->utilization_memory =
        (unsigned)get_uint(ld, obj, where, "utilization_memory_percent", 0, 100);
    gpu->sensors_supported = get_bool(ld, obj, where, "sensors_supported", true);
    gpu->temperature_c = (unsigned)get_uint(ld, obj, where, "temperature_c",
                                            35 + gpu->utilization_gpu / 2, 200);
    gpu->power_mw = 1000 * (unsigned)get_uint(ld, obj, where, "power_w",
                                              20 + 2 * gpu->utilization_gpu, 2000);
    gpu->minor_number = (unsigned)get_uint(ld, obj, where, "minor_number", NO_MINOR, 255);
    gpu->multiprocessor_count =
        (unsigned)get_uint(ld, obj, where, "multiprocessor_count", 16, 100000);
    gpu->persistence_mode = get_bool(ld, obj, where, "persistence_mode", true);
    gpu->energy_mj = get_uint(ld, obj, where, "energy_mj", 0, 1ull << 60);
    gpu->throttle_reasons = get_uint(ld, obj, where, "throttle_reasons", 0, 1ull << 32);
    gpu->retired_pages_pending = get_bool(ld, obj, where, "retired_pages_pending", false);
    gpu->remapped_correctable = (unsigned)get_uint(ld, obj, where, "remapped_correctable", 0, 1u << 20);
    gpu->remapped_uncorrectable =
        (unsigned)get_uint(ld, obj, where, "remapped_uncorrectable", 0, 1u << 20);
    gpu->remap_pending = get_bool(ld, obj, where, "remap_pending", false);
    gpu->remap_failure = get_bool(ld, obj, where, "remap_failure", false);
    gpu->ecc_uncorrected = field(ld, obj, where, "ecc_uncorrected", JSON_NUMBER)
        ? (long long)get_uint(ld, obj, where, "ecc_uncorrected", 0, 1ull << 40) : -1;
    load_events(ld, obj, where, gpu);
    gpu->mig_supported = get_bool(ld, obj, where, "mig_supported", true);
    gpu->mig_mode = get_bool(ld, obj, where, "mig_mode", false);
    if (gpu->mig_mode && !gpu->mig_supported)
        bad(ld, where, "\"mig_mode\" is true but \"mig_supported\" is false");

    const json_value *migs = field(ld, obj, where, "mig_devices", JSON_ARRAY);
    if (migs && migs->count > FK_MAX_MIGS)
        bad(ld, where, "at most %d \"mig_devices\"", FK_MAX_MIGS);
    else if (migs) {
        for (size_t i = 0; i < migs->count; i++) {
            char at[96];
            snprintf(at, sizeof at, "%s.mig_devices[%zu]", where, i);
            load_mig(ld, migs->items[i], at, gpu, (unsigned)i, &gpu->migs[i]);
        }
        gpu->mig_count = (unsigned)migs->count;
    }
    gpu->max_mig_devices = (unsigned)get_uint(ld, obj, where, "max_mig_devices", 7, FK_MAX_MIGS);
    if (gpu->max_mig_devices < gpu->mig_count)
        gpu->max_mig_devices = gpu->mig_count;

    load_processes(ld, obj, where, "processes", &gpu->compute_processes);
    load_processes(ld, obj, where, "graphics_processes", &gpu->graphics_processes);

    char error[32];
    if (get_string(ld, obj, where, "error", error, sizeof error)) {
        if (strcmp(error, "gpu_is_lost") == 0)
            gpu->lost = true;
        else
            bad(ld, where, "unknown \"error\" \"%s\" (known: gpu_is_lost)", error);
    }

    /* NVML's codes (nvml.h): what every process query of this GPU answers. */
    static const struct {
        const char *name;
        int code;
    } query_errors[] = {{"not_supported", 3}, {"no_permission", 4}, {"unknown", 999}};
    char query_error[32];
    if (get_string(ld, obj, where, "process_query_error", query_error, sizeof query_error)) {
        size_t i = 0;
        while (i < sizeof query_errors / sizeof query_errors[0] &&
               strcmp(query_error, query_errors[i].name) != 0)
            i++;
        if (i == sizeof query_errors / sizeof query_errors[0])
            bad(ld, where, "unknown \"process_query_error\" \"%s\"", query_error);
        else
            gpu->process_query_error = query_errors[i].code;
    }
}

static int compare_gpus(const void *a, const void *b)
{
    return fk_pci_compare(&((const fk_gpu *)a)->pci, &((const fk_gpu *)b)->pci);
}

/* Checks cross-GPU rules once the list is sorted, and fills in defaults that
 * depend on the NVML index. */
static void finish(loader *ld, fk_topology *topo)
{
    qsort(topo->gpus, topo->gpu_count, sizeof topo->gpus[0], compare_gpus);
    const char *uuids[FK_MAX_GPUS * (FK_MAX_MIGS + 1)];
    size_t nuuids = 0;
    for (unsigned i = 0; i < topo->gpu_count; i++) {
        fk_gpu *gpu = &topo->gpus[i];
        if (i > 0 && fk_pci_compare(&gpu->pci, &topo->gpus[i - 1].pci) == 0)
            bad(ld, "gpus", "two GPUs share PCI bus id %08X:%02X:%02X.%X", gpu->pci.domain,
                gpu->pci.bus, gpu->pci.device, gpu->pci.function);
        if (gpu->minor_number == NO_MINOR)
            gpu->minor_number = i;
        uuids[nuuids++] = gpu->uuid;
        for (unsigned m = 0; m < gpu->mig_count; m++)
            uuids[nuuids++] = gpu->migs[m].uuid;
    }
    for (size_t i = 0; i < nuuids; i++)
        for (size_t j = i + 1; j < nuuids; j++)
            if (strcmp(uuids[i], uuids[j]) == 0)
                bad(ld, "gpus", "duplicate uuid \"%s\"", uuids[i]);
}

static void load_document(loader *ld, const json_value *doc, fk_topology *topo)
{
    if (doc->type != JSON_OBJECT) {
        bad(ld, "", "the document must be a JSON object");
        return;
    }
    get_string(ld, doc, "", "driver_version", topo->driver_version, sizeof topo->driver_version);
    topo->cuda_driver_version =
        (int)get_uint(ld, doc, "", "cuda_driver_version", 12040, 99999);

    static const struct {
        const char *name;
        fk_init_error error;
    } init_errors[] = {
        {"driver_not_loaded", FK_INIT_DRIVER_NOT_LOADED},
        {"library_not_found", FK_INIT_LIBRARY_NOT_FOUND},
        {"no_permission", FK_INIT_NO_PERMISSION},
        {"lib_rm_version_mismatch", FK_INIT_LIB_RM_VERSION_MISMATCH},
    };
    char init_error[64];
    if (get_string(ld, doc, "", "init_error", init_error, sizeof init_error)) {
        size_t i = 0;
        while (i < sizeof init_errors / sizeof init_errors[0] &&
               strcmp(init_error, init_errors[i].name) != 0)
            i++;
        if (i == sizeof init_errors / sizeof init_errors[0])
            bad(ld, "", "unknown \"init_error\" \"%s\"", init_error);
        else
            topo->init_error = init_errors[i].error;
    }

    const json_value *missing = field(ld, doc, "", "missing_symbols", JSON_ARRAY);
    if (missing && missing->count > FK_MAX_MISSING)
        bad(ld, "", "at most %d \"missing_symbols\"", FK_MAX_MISSING);
    for (size_t i = 0; missing && i < missing->count && i < FK_MAX_MISSING; i++) {
        const json_value *name = missing->items[i];
        if (name->type != JSON_STRING || !name->string[0] ||
            strlen(name->string) >= sizeof topo->missing[0]) {
            bad(ld, "missing_symbols", "each must be a function name shorter than 80 bytes");
            break;
        }
        strcpy(topo->missing[topo->missing_count++], name->string);
    }

    const json_value *denied = field(ld, doc, "", "denied_symbols", JSON_ARRAY);
    if (denied && denied->count > FK_MAX_MISSING)
        bad(ld, "", "at most %d \"denied_symbols\"", FK_MAX_MISSING);
    for (size_t i = 0; denied && i < denied->count && i < FK_MAX_MISSING; i++) {
        const json_value *name = denied->items[i];
        if (name->type != JSON_STRING || !name->string[0] ||
            strlen(name->string) >= sizeof topo->denied[0]) {
            bad(ld, "denied_symbols", "each must be a function name shorter than 80 bytes");
            break;
        }
        strcpy(topo->denied[topo->denied_count++], name->string);
    }

    const json_value *gpus = field(ld, doc, "", "gpus", JSON_ARRAY);
    if (!gpus)
        return;
    if (gpus->count > FK_MAX_GPUS) {
        bad(ld, "", "at most %d \"gpus\"", FK_MAX_GPUS);
        return;
    }
    for (size_t i = 0; i < gpus->count; i++) {
        char where[32];
        snprintf(where, sizeof where, "gpus[%zu]", i);
        load_gpu(ld, gpus->items[i], where, (unsigned)i, &topo->gpus[i]);
    }
    topo->gpu_count = (unsigned)gpus->count;
    if (ld->ok)
        finish(ld, topo);
}

static char *read_file(loader *ld)
{
    FILE *f = fopen(ld->path, "rb");
    if (!f) {
        bad(ld, "", "cannot open: %s", strerror(errno));
        return NULL;
    }
    char *text = malloc(MAX_FILE_BYTES + 1);
    size_t n = text ? fread(text, 1, MAX_FILE_BYTES + 1, f) : 0;
    bool failed = !text || ferror(f) || n > MAX_FILE_BYTES;
    fclose(f);
    if (failed) {
        bad(ld, "", text ? "unreadable or larger than 16 MiB" : "out of memory");
        free(text);
        return NULL;
    }
    text[n] = '\0';
    return text;
}

/* Fills path with the topology file to read; false when there is none. */
static bool find_topology(const void *anchor, char *path, size_t size)
{
    const char *env = getenv(FK_TOPOLOGY_ENV);
    if (env && *env) {
        snprintf(path, size, "%s", env);
        return true;
    }
    Dl_info info;
    if (!dladdr(anchor, &info) || !info.dli_fname)
        return false;
    const char *slash = strrchr(info.dli_fname, '/');
    int dir_len = slash ? (int)(slash - info.dli_fname) : 1;
    const char *dir = slash ? info.dli_fname : ".";
    snprintf(path, size, "%.*s/%s", dir_len, dir, FK_TOPOLOGY_BESIDE_LIB);
    return access(path, F_OK) == 0;
}

long long fk_topology_stamp(const void *anchor)
{
    char path[4096];
    struct stat st;
    if (!find_topology(anchor, path, sizeof path) || stat(path, &st) != 0)
        return 0;
    return (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
}

bool fk_topology_load(fk_topology *topo, const char *tag, const void *anchor)
{
    memset(topo, 0, sizeof *topo);
    strcpy(topo->driver_version, "550.54.14");
    topo->cuda_driver_version = 12040;

    char path[4096];
    if (!find_topology(anchor, path, sizeof path))
        return true; /* no file: a loaded driver without GPUs */

    loader ld = {.tag = tag, .path = path, .ok = true};
    char *text = read_file(&ld);
    if (!text)
        return false;
    char err[160];
    json_value *doc = json_parse(text, err, sizeof err);
    free(text);
    if (!doc)
        bad(&ld, "", "%s", err);
    else
        load_document(&ld, doc, topo);
    json_free(doc);
    if (!ld.ok)
        memset(topo, 0, sizeof *topo);
    return ld.ok;
}

/* Parses a hex field of at most max_digits digits ending at `stop`. */
static bool hex_field(const char **s, char stop, int max_digits, unsigned *out)
{
    unsigned long v = 0;
    int digits = 0;
    for (; **s && **s != stop; (*s)++, digits++) {
        char c = **s;
        int d = (c >= '0' && c <= '9')   ? c - '0'
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                         : -1;
        if (d < 0 || digits == max_digits)
            return false;
        v = v * 16 + (unsigned long)d;
    }
    if (digits == 0 || **s != stop)
        return false;
    if (stop)
        (*s)++;
    *out = (unsigned)v;
    return true;
}

bool fk_parse_pci(const char *text, fk_pci *out)
{
    int colons = 0;
    for (const char *c = text; *c; c++)
        colons += *c == ':';
    fk_pci pci = {0};
    const char *s = text;
    if (colons == 2 && !hex_field(&s, ':', 8, &pci.domain))
        return false;
    if (colons < 1 || colons > 2 || !hex_field(&s, ':', 2, &pci.bus) ||
        !hex_field(&s, '.', 2, &pci.device) || !hex_field(&s, '\0', 1, &pci.function) ||
        pci.device > 0x1f || pci.function > 7)
        return false;
    *out = pci;
    return true;
}

int fk_pci_compare(const fk_pci *a, const fk_pci *b)
{
    const unsigned ka[] = {a->domain, a->bus, a->device, a->function};
    const unsigned kb[] = {b->domain, b->bus, b->device, b->function};
    for (int i = 0; i < 4; i++)
        if (ka[i] != kb[i])
            return ka[i] < kb[i] ? -1 : 1;
    return 0;
}

void fk_uuid_bytes(const char *uuid, unsigned char out[16])
{
    const char *hex = strchr(uuid, '-');
    hex = hex ? hex + 1 : uuid;
    int n = 0;
    unsigned char bytes[16] = {0};
    for (const char *c = hex; *c; c++) {
        int d = (*c >= '0' && *c <= '9')   ? *c - '0'
                : (*c >= 'a' && *c <= 'f') ? *c - 'a' + 10
                : (*c >= 'A' && *c <= 'F') ? *c - 'A' + 10
                                           : -1;
        if (d < 0) {
            if (*c == '-')
                continue;
            n = -1; /* not a plain hex UUID */
            break;
        }
        if (n == 32) {
            n = -1;
            break;
        }
        bytes[n / 2] |= (unsigned char)(d << (n % 2 ? 0 : 4));
        n++;
    }
    if (n == 32) {
        memcpy(out, bytes, 16);
        return;
    }
    /* Old-style ids such as "MIG-GPU-<uuid>/1/0": two FNV-1a hashes. */
    uint64_t h[2] = {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull};
    for (int k = 0; k < 2; k++)
        for (const char *c = uuid; *c; c++)
            h[k] = (h[k] ^ (unsigned char)*c) * 0x100000001b3ull;
    for (int i = 0; i < 16; i++)
        out[i] = (unsigned char)(h[i / 8] >> (8 * (i % 8)));
}

bool fk_missing(const fk_topology *topo, const char *name)
{
    for (unsigned i = 0; i < topo->missing_count; i++)
        if (strcmp(topo->missing[i], name) == 0)
            return true;
    return false;
}

bool fk_denied(const fk_topology *topo, const char *name)
{
    for (unsigned i = 0; i < topo->denied_count; i++)
        if (strcmp(topo->denied[i], name) == 0)
            return true;
    return false;
}
