/* Fake libcuda.so.1: the device-query corner of the CUDA driver API, served
 * from the same JSON topology as the fake libnvidia-ml. It mimics how the
 * real driver enumerates devices: CUDA_DEVICE_ORDER (FASTEST_FIRST by
 * default, or PCI_BUS_ID) and CUDA_VISIBLE_DEVICES. See README.md. */
#define _GNU_SOURCE
#include "topology.h"

#include <ctype.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define TAG "fake libcuda"

/* Our own minimal declarations (no CUDA header needed). */
typedef int CUresult;
typedef int CUdevice;
typedef int CUdevice_attribute;
typedef struct {
    char bytes[16];
} CUuuid;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_STUB_LIBRARY = 34,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_OPERATING_SYSTEM = 304,
    CUDA_ERROR_SYSTEM_DRIVER_MISMATCH = 803,
    CUDA_ERROR_UNKNOWN = 999,
};

enum {
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
    CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
    CU_DEVICE_ATTRIBUTE_INTEGRATED = 18,
    CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
    CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34, /* the slot number, not the vendor/device id */
    CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID = 50,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
};

/* A CUDA device: a whole GPU, or a MIG device of a GPU in MIG mode. */
typedef struct {
    const fk_gpu *gpu;
    const fk_mig *mig; /* NULL for a whole GPU */
    unsigned position; /* PCI-order position, the final tie-break */
} cuda_device;

#define MAX_DEVICES (FK_MAX_GPUS * FK_MAX_MIGS)

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_init_done;
static CUresult g_init_result;
static fk_topology g_topo;
static cuda_device g_devices[MAX_DEVICES];
static int g_device_count;

/* ------------------------------------------------------------------ */
/* Enumeration                                                        */

static unsigned multiprocessors(const cuda_device *d)
{
    return d->mig ? d->mig->multiprocessor_count : d->gpu->multiprocessor_count;
}

/* FASTEST_FIRST: compute capability, then SM count, descending; then PCI. */
static int compare_fastest_first(const void *pa, const void *pb)
{
    const cuda_device *a = pa, *b = pb;
    int ka[] = {a->gpu->cc_major, a->gpu->cc_minor, (int)multiprocessors(a)};
    int kb[] = {b->gpu->cc_major, b->gpu->cc_minor, (int)multiprocessors(b)};
    for (int i = 0; i < 3; i++)
        if (ka[i] != kb[i])
            return ka[i] > kb[i] ? -1 : 1;
    return a->position < b->position ? -1 : a->position > b->position;
}

static bool has_prefix_nocase(const char *s, const char *prefix)
{
    return strncasecmp(s, prefix, strlen(prefix)) == 0;
}

/* Resolves a "GPU-..." or "MIG-..." entry (full UUID or unique prefix). */
static int find_by_uuid(const cuda_device *all, int count, const char *entry)
{
    bool want_mig = has_prefix_nocase(entry, "MIG-");
    int found = -1;
    for (int i = 0; i < count; i++) {
        const cuda_device *d = &all[i];
        if (want_mig != (d->mig != NULL))
            continue;
        const char *uuid = d->mig ? d->mig->uuid : d->gpu->uuid;
        if (strcasecmp(uuid, entry) == 0)
            return i;
        if (has_prefix_nocase(uuid, entry)) {
            if (found >= 0)
                return -1; /* ambiguous prefix */
            found = i;
        }
    }
    return found;
}

/* Resolves one CUDA_VISIBLE_DEVICES entry to an index into `all`, or -1. */
static int resolve_entry(const cuda_device *all, int count, const char *entry)
{
    if (!*entry)
        return -1;
    if (isdigit((unsigned char)*entry)) {
        char *end;
        long n = strtol(entry, &end, 10);
        return *end || n >= count ? -1 : (int)n;
    }
    if (has_prefix_nocase(entry, "GPU-") || has_prefix_nocase(entry, "MIG-"))
        return find_by_uuid(all, count, entry);
    return -1;
}

/* Applies CUDA_VISIBLE_DEVICES: like the real driver, the list ends at the
 * first entry that is invalid, unknown or a repeat. */
static int apply_visible_devices(const cuda_device *all, int count, const char *spec,
                                 cuda_device *out)
{
    char *copy = strdup(spec);
    if (!copy)
        return 0;
    bool used[MAX_DEVICES] = {false};
    int n = 0;
    char *save = NULL;
    /* strtok_r would skip empty entries; walk the commas by hand instead. */
    for (char *entry = copy; entry; entry = save) {
        save = strchr(entry, ',');
        if (save)
            *save++ = '\0';
        while (isspace((unsigned char)*entry))
            entry++;
        char *end = entry + strlen(entry);
        while (end > entry && isspace((unsigned char)end[-1]))
            *--end = '\0';
        int i = resolve_entry(all, count, entry);
        if (i < 0 || used[i])
            break;
        used[i] = true;
        out[n++] = all[i];
    }
    free(copy);
    return n;
}

static void enumerate(void)
{
    /* Every usable device in PCI order: lost GPUs vanish, a GPU in MIG mode
     * is replaced by its MIG devices. */
    static cuda_device all[MAX_DEVICES];
    int count = 0;
    for (unsigned i = 0; i < g_topo.gpu_count; i++) {
        const fk_gpu *gpu = &g_topo.gpus[i];
        if (gpu->lost)
            continue;
        if (!gpu->mig_mode) {
            all[count] = (cuda_device){gpu, NULL, (unsigned)count};
            count++;
            continue;
        }
        for (unsigned m = 0; m < gpu->mig_count; m++) {
            all[count] = (cuda_device){gpu, &gpu->migs[m], (unsigned)count};
            count++;
        }
    }
    const char *order = getenv("CUDA_DEVICE_ORDER");
    if (!order || strcmp(order, "PCI_BUS_ID") != 0)
        qsort(all, (size_t)count, sizeof all[0], compare_fastest_first);

    const char *visible = getenv("CUDA_VISIBLE_DEVICES");
    if (visible) {
        g_device_count = apply_visible_devices(all, count, visible, g_devices);
    } else {
        memcpy(g_devices, all, (size_t)count * sizeof all[0]);
        g_device_count = count;
    }
}

/* ------------------------------------------------------------------ */
/* Init and version                                                   */

static CUresult init_locked(void)
{
    if (!fk_topology_load(&g_topo, TAG, (const void *)&init_locked))
        return CUDA_ERROR_UNKNOWN;
    switch (g_topo.init_error) {
    case FK_INIT_OK: break;
    case FK_INIT_DRIVER_NOT_LOADED: return CUDA_ERROR_NO_DEVICE;
    case FK_INIT_LIBRARY_NOT_FOUND: return CUDA_ERROR_STUB_LIBRARY;
    case FK_INIT_NO_PERMISSION: return CUDA_ERROR_OPERATING_SYSTEM;
    case FK_INIT_LIB_RM_VERSION_MISMATCH: return CUDA_ERROR_SYSTEM_DRIVER_MISMATCH;
    }
    enumerate();
    return g_device_count > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

/* Like the real driver, the outcome of the first cuInit sticks. */
CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    if (!g_init_done) {
        g_init_result = init_locked();
        g_init_done = true;
    }
    CUresult ret = g_init_result;
    pthread_mutex_unlock(&g_lock);
    return ret;
}

/* Works before cuInit, as the real one does. */
CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&g_lock);
    bool loaded = g_init_done;
    int version = g_topo.cuda_driver_version;
    pthread_mutex_unlock(&g_lock);
    if (!loaded) {
        fk_topology *topo = malloc(sizeof *topo);
        if (!topo)
            return CUDA_ERROR_UNKNOWN;
        version = fk_topology_load(topo, TAG, (const void *)&cuDriverGetVersion)
                      ? topo->cuda_driver_version : 12040;
        free(topo);
    }
    *driverVersion = version;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Device queries                                                     */

/* Common checks; on success *out is the device. */
static CUresult get_device(CUdevice dev, const void *ptr, const cuda_device **out)
{
    if (!g_init_done)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (g_init_result != CUDA_SUCCESS)
        return g_init_result;
    if (!ptr)
        return CUDA_ERROR_INVALID_VALUE;
    if (dev < 0 || dev >= g_device_count)
        return CUDA_ERROR_INVALID_DEVICE;
    *out = &g_devices[dev];
    return CUDA_SUCCESS;
}

#define GET_DEVICE(dev, ptr, out)                           \
    do {                                                    \
        CUresult ret_ = get_device((dev), (ptr), (out));    \
        if (ret_ != CUDA_SUCCESS)                           \
            return ret_;                                    \
    } while (0)

/* After a failed cuInit the count is 0 and the init error is returned. */
CUresult cuDeviceGetCount(int *count)
{
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = 0;
    if (!g_init_done)
        return CUDA_ERROR_NOT_INITIALIZED;
    if (g_init_result != CUDA_SUCCESS)
        return g_init_result;
    *count = g_device_count;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    const cuda_device *d;
    GET_DEVICE(ordinal, device, &d);
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    const cuda_device *d;
    GET_DEVICE(dev, name, &d);
    if (len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (d->mig)
        snprintf(name, (size_t)len, "%s MIG%s%s", d->gpu->name, d->mig->profile[0] ? " " : "",
                 d->mig->profile);
    else
        snprintf(name, (size_t)len, "%s", d->gpu->name);
    return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    const cuda_device *d;
    GET_DEVICE(dev, bytes, &d);
    unsigned long long mib = d->mig ? d->mig->memory_total_mib : d->gpu->cuda_memory_total_mib;
    *bytes = (size_t)(mib << 20);
    return CUDA_SUCCESS;
}

/* The pre-CUDA-3.2 ABI with a 32-bit result. */
CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    size_t total;
    CUresult ret = cuDeviceTotalMem_v2(bytes ? &total : NULL, dev);
    if (ret == CUDA_SUCCESS)
        *bytes = total > UINT_MAX ? UINT_MAX : (unsigned int)total;
    return ret;
}

/* _v2 identifies MIG devices by their MIG UUID... */
CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    const cuda_device *d;
    GET_DEVICE(dev, uuid, &d);
    fk_uuid_bytes(d->mig ? d->mig->uuid : d->gpu->uuid, (unsigned char *)uuid->bytes);
    return CUDA_SUCCESS;
}

/* ...while the original reports the parent GPU's UUID for them. */
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    const cuda_device *d;
    GET_DEVICE(dev, uuid, &d);
    fk_uuid_bytes(d->gpu->uuid, (unsigned char *)uuid->bytes);
    return CUDA_SUCCESS;
}

/* Format "[domain]:[bus]:[device].[function]", e.g. "0000:81:00.0". */
CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    const cuda_device *d;
    GET_DEVICE(dev, pciBusId, &d);
    if (len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    const fk_pci *pci = &d->gpu->pci;
    snprintf(pciBusId, (size_t)len, "%04X:%02X:%02X.%X", pci->domain, pci->bus, pci->device,
             pci->function);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    const cuda_device *d;
    GET_DEVICE(dev, pi, &d);
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *pi = 32; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *pi = (int)multiprocessors(d); break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: *pi = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *pi = (int)d->gpu->pci.bus; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *pi = (int)d->gpu->pci.device; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *pi = (int)d->gpu->pci.domain; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *pi = d->gpu->cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *pi = d->gpu->cc_minor; break;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

/* Deprecated, but still exported by the real driver. */
CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    const cuda_device *d;
    GET_DEVICE(dev, major, &d);
    if (!minor)
        return CUDA_ERROR_INVALID_VALUE;
    *major = d->gpu->cc_major;
    *minor = d->gpu->cc_minor;
    return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Error strings                                                      */

static const struct {
    CUresult code;
    const char *name, *text;
} errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM",
     "OS call failed or operation not supported on this OS"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "system has unsupported display driver / cuda driver combination"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static CUresult lookup_error(CUresult error, const char **out, bool want_name)
{
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        if (errors[i].code == error) {
            *out = want_name ? errors[i].name : errors[i].text;
            return CUDA_SUCCESS;
        }
    }
    *out = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    return lookup_error(error, pStr, false);
}

CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    return lookup_error(error, pStr, true);
}
