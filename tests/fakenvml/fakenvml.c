/* Fake libnvidia-ml.so.1: serves the GPUs of a JSON topology file through
 * the real NVML ABI (NVIDIA's nvml.h), so pynvml and friends work without a
 * GPU. See README.md. */
#define _GNU_SOURCE
#define NVML_NO_UNVERSIONED_FUNC_DEFS /* declare nvmlInit and nvmlInit_v2 alike */
#include <nvml.h>

#include "topology.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "fake libnvidia-ml"
#define NO_INSTANCE 0xFFFFFFFFu /* gpuInstanceId/computeInstanceId outside MIG */

/* What an nvmlDevice_t points to: a physical GPU or one of its MIG devices. */
struct nvmlDevice_st {
    fk_gpu *gpu; /* the physical GPU (the parent, for MIG handles) */
    fk_mig *mig; /* NULL for physical GPU handles */
    unsigned index; /* NVML index, or MIG index under the parent */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint g_refcount;
static fk_topology g_topo;
static struct nvmlDevice_st g_gpu_handles[FK_MAX_GPUS];
static struct nvmlDevice_st g_mig_handles[FK_MAX_GPUS][FK_MAX_MIGS];

/* ------------------------------------------------------------------ */
/* Init / shutdown                                                    */

static long long g_stamp; /* the loaded file's modification time */
static nvmlReturn_t g_reload_error; /* with FAKE_NVML_RELOAD: the last reload's failure */

/* Reads the topology file again and serves it: NVML_SUCCESS, or the error the
 * file's init_error (or a malformed file) stands for. */
static nvmlReturn_t load_locked(void)
{
    g_stamp = fk_topology_stamp((const void *)&load_locked);
    if (!fk_topology_load(&g_topo, TAG, (const void *)&load_locked))
        return NVML_ERROR_UNKNOWN;
    switch (g_topo.init_error) {
    case FK_INIT_OK: break;
    case FK_INIT_DRIVER_NOT_LOADED: return NVML_ERROR_DRIVER_NOT_LOADED;
    case FK_INIT_LIBRARY_NOT_FOUND: return NVML_ERROR_LIBRARY_NOT_FOUND;
    case FK_INIT_NO_PERMISSION: return NVML_ERROR_NO_PERMISSION;
    case FK_INIT_LIB_RM_VERSION_MISMATCH: return NVML_ERROR_LIB_RM_VERSION_MISMATCH;
    }
    for (unsigned i = 0; i < g_topo.gpu_count; i++) {
        fk_gpu *gpu = &g_topo.gpus[i];
        g_gpu_handles[i] = (struct nvmlDevice_st){gpu, NULL, i};
        for (unsigned m = 0; m < gpu->mig_count; m++)
            g_mig_handles[i][m] = (struct nvmlDevice_st){gpu, &gpu->migs[m], m};
    }
    return NVML_SUCCESS;
}

static nvmlReturn_t init_locked(void)
{
    if (g_refcount > 0) {
        g_refcount++;
        return NVML_SUCCESS;
    }
    /* First init (again): re-read the file so tests can change it. */
    nvmlReturn_t ret = load_locked();
    if (ret != NVML_SUCCESS) {
        g_topo.gpu_count = 0;
        return ret;
    }
    g_reload_error = NVML_SUCCESS;
    g_refcount = 1;
    return NVML_SUCCESS;
}

/* With FAKE_NVML_RELOAD set, a file changed since it was read is read again, as a
 * driver that changes under a running monitor; a failing file (malformed, or an
 * init_error: the driver went away) fails the device count until it is fixed. */
static nvmlReturn_t reload_if_changed(void)
{
    const char *reload = getenv(FK_RELOAD_ENV);
    if (!reload || !*reload)
        return NVML_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (fk_topology_stamp((const void *)&load_locked) != g_stamp) {
        g_reload_error = load_locked();
        if (g_reload_error != NVML_SUCCESS)
            g_topo.gpu_count = 0;
    }
    nvmlReturn_t ret = g_reload_error;
    pthread_mutex_unlock(&g_lock);
    return ret;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags; /* NO_GPUS is implied: zero GPUs never fails init here */
    pthread_mutex_lock(&g_lock);
    nvmlReturn_t ret = init_locked();
    pthread_mutex_unlock(&g_lock);
    return ret;
}

nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

nvmlReturn_t nvmlInit(void)
{
    return nvmlInitWithFlags(0);
}

nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&g_lock);
    nvmlReturn_t ret = NVML_ERROR_UNINITIALIZED;
    if (g_refcount > 0) {
        g_refcount--;
        ret = NVML_SUCCESS;
    }
    pthread_mutex_unlock(&g_lock);
    return ret;
}

const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
    }
}

/* ------------------------------------------------------------------ */
/* Helpers                                                            */

#define RETURN_IF_FAILED(expr)           \
    do {                                 \
        nvmlReturn_t ret_ = (expr);      \
        if (ret_ != NVML_SUCCESS)        \
            return ret_;                 \
    } while (0)

/* MIG devices exist only while the GPU is in MIG mode. */
static unsigned served_migs(const fk_gpu *gpu)
{
    return gpu->mig_mode ? gpu->mig_count : 0;
}

static bool is_known_handle(nvmlDevice_t dev)
{
    for (unsigned i = 0; i < g_topo.gpu_count; i++) {
        if (dev == &g_gpu_handles[i])
            return true;
        for (unsigned m = 0; m < served_migs(&g_topo.gpus[i]); m++)
            if (dev == &g_mig_handles[i][m])
                return true;
    }
    return false;
}

/* Common checks for a query on `dev` writing through `out`. */
static nvmlReturn_t check_device(nvmlDevice_t dev, const void *out)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!dev || !out || !is_known_handle(dev))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (dev->gpu->lost)
        return NVML_ERROR_GPU_IS_LOST;
    return NVML_SUCCESS;
}

/* Like check_device, for queries that only make sense on a physical GPU. */
static nvmlReturn_t check_gpu(nvmlDevice_t dev, const void *out)
{
    RETURN_IF_FAILED(check_device(dev, out));
    return dev->mig ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

static nvmlReturn_t copy_string(char *buf, unsigned int length, const char *value)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(buf, value);
    return NVML_SUCCESS;
}

static void format_bus_id(const fk_pci *pci, char *buf, size_t size)
{
    snprintf(buf, size, "%08X:%02X:%02X.%X", pci->domain, pci->bus, pci->device,
             pci->function);
}

static unsigned long long mib(unsigned long long n)
{
    return n << 20;
}

/* ------------------------------------------------------------------ */
/* System queries                                                     */

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    return copy_string(version, length, g_topo.driver_version);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    /* Real format: "<CUDA major>.<driver version>", e.g. "12.550.54.14". */
    char buf[sizeof g_topo.driver_version + 16];
    snprintf(buf, sizeof buf, "%d.%s", g_topo.cuda_driver_version / 1000,
             g_topo.driver_version);
    return copy_string(version, length, buf);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = g_topo.cuda_driver_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* Names come from the topology's process entries, else /proc/<pid>/comm. */
nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    for (unsigned i = 0; i < g_topo.gpu_count; i++) {
        const fk_gpu *gpu = &g_topo.gpus[i];
        const fk_process_list *lists[2 + FK_MAX_MIGS] = {&gpu->compute_processes,
                                                         &gpu->graphics_processes};
        for (unsigned m = 0; m < gpu->mig_count; m++)
            lists[2 + m] = &gpu->migs[m].processes;
        for (unsigned l = 0; l < 2 + gpu->mig_count; l++)
            for (unsigned p = 0; p < lists[l]->count; p++)
                if (lists[l]->list[p].pid == pid && lists[l]->list[p].name[0])
                    return copy_string(name, length, lists[l]->list[p].name);
    }
    char path[64], comm[256];
    snprintf(path, sizeof path, "/proc/%u/comm", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return NVML_ERROR_NOT_FOUND;
    size_t n = fread(comm, 1, sizeof comm - 1, f);
    fclose(f);
    comm[n] = '\0';
    comm[strcspn(comm, "\n")] = '\0';
    return copy_string(name, length, comm);
}

/* ------------------------------------------------------------------ */
/* Device enumeration                                                 */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    RETURN_IF_FAILED(reload_if_changed());
    *deviceCount = g_topo.gpu_count; /* lost GPUs included, as in real NVML */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= g_topo.gpu_count)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g_gpu_handles[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* Finds a GPU or MIG device by UUID. A lost GPU cannot report its UUID. */
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < g_topo.gpu_count; i++) {
        const fk_gpu *gpu = &g_topo.gpus[i];
        nvmlDevice_t found = NULL;
        if (strcmp(gpu->uuid, uuid) == 0)
            found = &g_gpu_handles[i];
        for (unsigned m = 0; m < served_migs(gpu) && !found; m++)
            if (strcmp(gpu->migs[m].uuid, uuid) == 0)
                found = &g_mig_handles[i][m];
        if (found && gpu->lost)
            return NVML_ERROR_GPU_IS_LOST;
        if (found) {
            *device = found;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByUUIDV(const nvmlUUID_t *uuid, nvmlDevice_t *device)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (uuid->version != nvmlUUID_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (uuid->type == NVML_UUID_TYPE_ASCII) {
        char text[NVML_DEVICE_UUID_ASCII_LEN + 1] = {0};
        memcpy(text, uuid->value.str, NVML_DEVICE_UUID_ASCII_LEN);
        return nvmlDeviceGetHandleByUUID(text, device);
    }
    if (uuid->type != NVML_UUID_TYPE_BINARY)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < g_topo.gpu_count; i++) {
        unsigned char bytes[16];
        fk_uuid_bytes(g_topo.gpus[i].uuid, bytes);
        if (memcmp(bytes, uuid->value.bytes, 16) == 0)
            return nvmlDeviceGetHandleByUUID(g_topo.gpus[i].uuid, device);
        for (unsigned m = 0; m < served_migs(&g_topo.gpus[i]); m++) {
            fk_uuid_bytes(g_topo.gpus[i].migs[m].uuid, bytes);
            if (memcmp(bytes, uuid->value.bytes, 16) == 0)
                return nvmlDeviceGetHandleByUUID(g_topo.gpus[i].migs[m].uuid, device);
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* The PCI address is known without talking to the GPU, so this works for
 * lost GPUs too (like nvmlDeviceGetHandleByIndex). */
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    fk_pci pci;
    if (!pciBusId || !device || !fk_parse_pci(pciBusId, &pci))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < g_topo.gpu_count; i++) {
        if (fk_pci_compare(&g_topo.gpus[i].pci, &pci) == 0) {
            *device = &g_gpu_handles[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* ------------------------------------------------------------------ */
/* Identity                                                           */

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    RETURN_IF_FAILED(check_device(device, name));
    if (!device->mig)
        return copy_string(name, length, device->gpu->name);
    /* Real MIG names look like "NVIDIA A100-SXM4-40GB MIG 1g.5gb". */
    char buf[FK_NAME_LEN + 40];
    snprintf(buf, sizeof buf, "%s MIG%s%s", device->gpu->name,
             device->mig->profile[0] ? " " : "", device->mig->profile);
    return copy_string(name, length, buf);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    RETURN_IF_FAILED(check_device(device, uuid));
    return copy_string(uuid, length, device->mig ? device->mig->uuid : device->gpu->uuid);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    RETURN_IF_FAILED(check_gpu(device, index));
    *index = device->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    RETURN_IF_FAILED(check_gpu(device, minorNumber));
    *minorNumber = device->gpu->minor_number;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    RETURN_IF_FAILED(check_gpu(device, mode));
    *mode = device->gpu->persistence_mode ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    if (fk_denied(&g_topo, __func__))
        return NVML_ERROR_NO_PERMISSION;
    RETURN_IF_FAILED(check_device(device, major));
    if (!minor)
        return NVML_ERROR_INVALID_ARGUMENT;
    *major = device->gpu->cc_major;
    *minor = device->gpu->cc_minor;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* PCI                                                                */

/* nvmlPciInfo_t as it was for nvmlDeviceGetPciInfo and _v2: the bus id
 * field is 16 bytes and the struct is 16 bytes shorter than today's. */
typedef struct {
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    unsigned int reserved[4];
} legacy_pci_info;

static void fill_legacy_pci(const fk_gpu *gpu, legacy_pci_info *pci)
{
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT,
             gpu->pci.domain, gpu->pci.bus, gpu->pci.device);
    pci->domain = gpu->pci.domain;
    pci->bus = gpu->pci.bus;
    pci->device = gpu->pci.device;
    pci->pciDeviceId = gpu->pci_device_id;
    pci->pciSubSystemId = gpu->pci_subsystem_id;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    RETURN_IF_FAILED(check_gpu(device, pci));
    legacy_pci_info legacy;
    fill_legacy_pci(device->gpu, &legacy);
    memset(pci, 0, sizeof *pci);
    memcpy(pci->busIdLegacy, legacy.busId, sizeof pci->busIdLegacy);
    pci->domain = legacy.domain;
    pci->bus = legacy.bus;
    pci->device = legacy.device;
    pci->pciDeviceId = legacy.pciDeviceId;
    pci->pciSubSystemId = legacy.pciSubSystemId;
    format_bus_id(&device->gpu->pci, pci->busId, sizeof pci->busId);
    return NVML_SUCCESS;
}

/* Old callers pass the shorter legacy struct: never write past it. */
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    RETURN_IF_FAILED(check_gpu(device, pci));
    fill_legacy_pci(device->gpu, (legacy_pci_info *)(void *)pci);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v2(device, pci);
}

nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t *pci)
{
    RETURN_IF_FAILED(check_gpu(device, pci));
    if (pci->version != nvmlPciInfoExt_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const fk_gpu *gpu = device->gpu;
    memset(pci, 0, sizeof *pci);
    pci->version = nvmlPciInfoExt_v1;
    pci->domain = gpu->pci.domain;
    pci->bus = gpu->pci.bus;
    pci->device = gpu->pci.device;
    pci->pciDeviceId = gpu->pci_device_id;
    pci->pciSubSystemId = gpu->pci_subsystem_id;
    pci->baseClass = 0x03; /* display controller */
    pci->subClass = 0x02;  /* 3D controller */
    format_bus_id(&gpu->pci, pci->busId, sizeof pci->busId);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Memory, utilization, attributes                                    */

static void memory_of(nvmlDevice_t device, unsigned long long *total, unsigned long long *used)
{
    *total = mib(device->mig ? device->mig->memory_total_mib : device->gpu->memory_total_mib);
    *used = mib(device->mig ? device->mig->memory_used_mib : device->gpu->memory_used_mib);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    if (fk_denied(&g_topo, __func__))
        return NVML_ERROR_NO_PERMISSION;
    RETURN_IF_FAILED(check_device(device, memory));
    memory_of(device, &memory->total, &memory->used);
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    if (fk_denied(&g_topo, __func__))
        return NVML_ERROR_NO_PERMISSION;
    RETURN_IF_FAILED(check_device(device, memory));
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->reserved = 0;
    memory_of(device, &memory->total, &memory->used);
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    RETURN_IF_FAILED(check_gpu(device, utilization));
    utilization->gpu = device->gpu->utilization_gpu;
    utilization->memory = device->gpu->utilization_memory;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    RETURN_IF_FAILED(check_device(device, attributes));
    memset(attributes, 0, sizeof *attributes);
    const fk_mig *mig = device->mig;
    attributes->multiprocessorCount =
        mig ? mig->multiprocessor_count : device->gpu->multiprocessor_count;
    attributes->memorySizeMB = mig ? mig->memory_total_mib : device->gpu->memory_total_mib;
    attributes->gpuInstanceSliceCount = mig ? 1 : device->gpu->max_mig_devices;
    attributes->computeInstanceSliceCount = attributes->gpuInstanceSliceCount;
    attributes->sharedCopyEngineCount = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    return nvmlDeviceGetAttributes_v2(device, attributes);
}

/* ------------------------------------------------------------------ */
/* MIG                                                                */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode)
{
    RETURN_IF_FAILED(check_gpu(device, currentMode));
    if (!pendingMode)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->gpu->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = *pendingMode =
        device->gpu->mig_mode ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return NVML_SUCCESS;
}

/* "Returns zero if MIG is not supported or enabled." */
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    RETURN_IF_FAILED(check_gpu(device, count));
    *count = device->gpu->mig_mode ? device->gpu->max_mig_devices : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *migDevice)
{
    RETURN_IF_FAILED(check_gpu(device, migDevice));
    const fk_gpu *gpu = device->gpu;
    if (!gpu->mig_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!gpu->mig_mode || index >= gpu->max_mig_devices)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= gpu->mig_count)
        return NVML_ERROR_NOT_FOUND; /* a free slot: no MIG device there */
    *migDevice = &g_mig_handles[device->index][index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    RETURN_IF_FAILED(check_device(device, isMigDevice));
    *isMigDevice = device->mig != NULL;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                          nvmlDevice_t *device)
{
    RETURN_IF_FAILED(check_device(migDevice, device));
    if (!migDevice->mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &g_gpu_handles[migDevice->gpu - g_topo.gpus];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    RETURN_IF_FAILED(check_device(device, id));
    if (!device->mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = device->mig->gpu_instance_id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    RETURN_IF_FAILED(check_device(device, id));
    if (!device->mig)
        return NVML_ERROR_NOT_SUPPORTED;
    *id = device->mig->compute_instance_id;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Running processes                                                  */

typedef enum { COMPUTE, GRAPHICS, MPS } process_kind;

/* Gathers the processes of `kind` seen through `device`. A physical GPU in
 * MIG mode also reports its MIG devices' processes, tagged with their ids. */
static unsigned collect_processes(nvmlDevice_t device, process_kind kind,
                                  nvmlProcessInfo_v2_t *out)
{
    unsigned n = 0;
    const fk_gpu *gpu = device->gpu;
    for (unsigned m = 0; m < served_migs(gpu) && kind == COMPUTE; m++) {
        const fk_mig *mig = &gpu->migs[m];
        if (device->mig && device->mig != mig)
            continue;
        for (unsigned p = 0; p < mig->processes.count; p++)
            out[n++] = (nvmlProcessInfo_v2_t){
                .pid = mig->processes.list[p].pid,
                .usedGpuMemory = mib(mig->processes.list[p].used_memory_mib),
                .gpuInstanceId = mig->gpu_instance_id,
                .computeInstanceId = mig->compute_instance_id,
            };
    }
    if (device->mig || kind == MPS)
        return n;
    const fk_process_list *list =
        kind == COMPUTE ? &gpu->compute_processes : &gpu->graphics_processes;
    for (unsigned p = 0; p < list->count; p++)
        out[n++] = (nvmlProcessInfo_v2_t){
            .pid = list->list[p].pid,
            .usedGpuMemory = mib(list->list[p].used_memory_mib),
            .gpuInstanceId = NO_INSTANCE,
            .computeInstanceId = NO_INSTANCE,
        };
    return n;
}

/* The NVML size-query protocol: with *infoCount too small (pynvml first
 * passes 0 and NULL) set *infoCount and return INSUFFICIENT_SIZE, except
 * that zero processes is a plain success. legacy: v1 struct layout. */
static nvmlReturn_t get_processes(const char *function, nvmlDevice_t device, process_kind kind,
                                  unsigned int *infoCount, void *infos, bool legacy)
{
    if (fk_missing(&g_topo, function)) /* as a driver without this version of the query */
        return NVML_ERROR_FUNCTION_NOT_FOUND;
    RETURN_IF_FAILED(check_device(device, infoCount));
    if (device->gpu->process_query_error)
        return (nvmlReturn_t)device->gpu->process_query_error;
    nvmlProcessInfo_v2_t found[FK_MAX_PROCS * (FK_MAX_MIGS + 1)];
    unsigned n = collect_processes(device, kind, found);
    if (*infoCount < n) {
        *infoCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n > 0 && !infos)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned i = 0; i < n; i++) {
        if (legacy)
            ((nvmlProcessInfo_v1_t *)infos)[i] = (nvmlProcessInfo_v1_t){
                .pid = found[i].pid, .usedGpuMemory = found[i].usedGpuMemory};
        else
            ((nvmlProcessInfo_v2_t *)infos)[i] = found[i];
    }
    *infoCount = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                     unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    return get_processes(__func__, device, COMPUTE, infoCount, infos, false);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                     unsigned int *infoCount,
                                                     nvmlProcessInfo_v2_t *infos)
{
    return get_processes(__func__, device, COMPUTE, infoCount, infos, false);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos)
{
    return get_processes(__func__, device, COMPUTE, infoCount, infos, true);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device,
                                                      unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos)
{
    return get_processes(__func__, device, GRAPHICS, infoCount, infos, false);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device,
                                                      unsigned int *infoCount,
                                                      nvmlProcessInfo_v2_t *infos)
{
    return get_processes(__func__, device, GRAPHICS, infoCount, infos, false);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                   nvmlProcessInfo_v1_t *infos)
{
    return get_processes(__func__, device, GRAPHICS, infoCount, infos, true);
}

/* No MPS servers in a fake topology: always an empty list. */
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device,
                                                        unsigned int *infoCount,
                                                        nvmlProcessInfo_t *infos)
{
    return get_processes(__func__, device, MPS, infoCount, infos, false);
}

/* ------------------------------------------------------------------ */
/* Sensors and modes (what monitors such as nvitop show): fixed,      */
/* plausible values that follow the GPU's utilization.                */

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int *temp)
{
    RETURN_IF_FAILED(check_gpu(device, temp));
    if (sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!device->gpu->sensors_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    *temp = device->gpu->temperature_c;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    RETURN_IF_FAILED(check_gpu(device, speed));
    *speed = 30 + device->gpu->utilization_gpu / 2;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    RETURN_IF_FAILED(check_gpu(device, power));
    if (!device->gpu->sensors_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    *power = device->gpu->power_mw; /* milliwatts */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    RETURN_IF_FAILED(check_gpu(device, limit));
    *limit = 250000;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    RETURN_IF_FAILED(check_gpu(device, pState));
    *pState = device->gpu->utilization_gpu > 0 ? NVML_PSTATE_0 : NVML_PSTATE_8;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    RETURN_IF_FAILED(check_gpu(device, mode));
    *mode = NVML_COMPUTEMODE_DEFAULT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *display)
{
    RETURN_IF_FAILED(check_gpu(device, display));
    *display = NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t *isActive)
{
    RETURN_IF_FAILED(check_gpu(device, isActive));
    *isActive = NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

/* Encoder and decoder are idle. */
static nvmlReturn_t codec_utilization(nvmlDevice_t device, unsigned int *utilization,
                                      unsigned int *samplingPeriodUs)
{
    RETURN_IF_FAILED(check_gpu(device, utilization));
    if (!samplingPeriodUs)
        return NVML_ERROR_INVALID_ARGUMENT;
    *utilization = 0;
    *samplingPeriodUs = 167000;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs)
{
    return codec_utilization(device, utilization, samplingPeriodUs);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs)
{
    return codec_utilization(device, utilization, samplingPeriodUs);
}

/* ECC: the uncorrected volatile count of "ecc_uncorrected", else not supported (as the
 * driver model, Windows only). */
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType,
                                         unsigned long long *eccCounts)
{
    RETURN_IF_FAILED(check_gpu(device, eccCounts));
    if (device->gpu->ecc_uncorrected < 0 || errorType != NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
        return NVML_ERROR_NOT_SUPPORTED;
    *eccCounts = counterType == NVML_VOLATILE_ECC ? (unsigned long long)device->gpu->ecc_uncorrected
                                                  : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDriverModel_v2(nvmlDevice_t device, nvmlDriverModel_t *current,
                                         nvmlDriverModel_t *pending)
{
    (void)pending;
    RETURN_IF_FAILED(check_gpu(device, current));
    return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetDriverModel(nvmlDevice_t device, nvmlDriverModel_t *current,
                                      nvmlDriverModel_t *pending)
{
    return nvmlDeviceGetDriverModel_v2(device, current, pending);
}

/* ------------------------------------------------------------------ */
/* Health and cost: energy, clock-event reasons, retired and remapped */
/* pages, volatile ECC; a function named in "missing_symbols" answers  */
/* FUNCTION_NOT_FOUND, one in "denied_symbols" NO_PERMISSION.          */

#define RETURN_IF_WITHHELD()                                \
    do {                                                    \
        if (fk_missing(&g_topo, __func__))                  \
            return NVML_ERROR_FUNCTION_NOT_FOUND;           \
        if (fk_denied(&g_topo, __func__))                   \
            return NVML_ERROR_NO_PERMISSION;                \
    } while (0)

#include <time.h>

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static double g_loaded_at; /* when the library first answered an energy query */

/* millijoules since the driver loaded: the topology's "energy_mj", plus the power
 * drawn since this process first asked. */
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    RETURN_IF_WITHHELD();
    RETURN_IF_FAILED(check_gpu(device, energy));
    if (!device->gpu->sensors_supported)
        return NVML_ERROR_NOT_SUPPORTED;
    if (g_loaded_at == 0)
        g_loaded_at = seconds_now();
    double drawn = device->gpu->power_mw * (seconds_now() - g_loaded_at);
    *energy = device->gpu->energy_mj + (unsigned long long)drawn;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                    unsigned long long *reasons)
{
    RETURN_IF_WITHHELD();
    RETURN_IF_FAILED(check_gpu(device, reasons));
    *reasons = device->gpu->throttle_reasons;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                       unsigned long long *reasons)
{
    RETURN_IF_WITHHELD();
    return nvmlDeviceGetCurrentClocksEventReasons(device, reasons);
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                    nvmlEnableState_t *isPending)
{
    RETURN_IF_WITHHELD();
    RETURN_IF_FAILED(check_gpu(device, isPending));
    *isPending = device->gpu->retired_pages_pending ? NVML_FEATURE_ENABLED
                                                    : NVML_FEATURE_DISABLED;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                       unsigned int *uncRows, unsigned int *isPending,
                                       unsigned int *failureOccurred)
{
    RETURN_IF_WITHHELD();
    RETURN_IF_FAILED(check_gpu(device, corrRows));
    if (!uncRows || !isPending || !failureOccurred)
        return NVML_ERROR_INVALID_ARGUMENT;
    *corrRows = device->gpu->remapped_correctable;
    *uncRows = device->gpu->remapped_uncorrectable;
    *isPending = device->gpu->remap_pending;
    *failureOccurred = device->gpu->remap_failure;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* Events: each event of the topology is delivered once per event set */
/* that registered its GPU (again after the file is reloaded).        */

#define FK_EVENT_TYPES (nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError)

struct nvmlEventSet_st {
    unsigned long long types[FK_MAX_GPUS]; /* registered per GPU index */
    unsigned delivered[FK_MAX_GPUS];
    long long stamp; /* the file those counts are for */
};

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    RETURN_IF_WITHHELD();
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!set)
        return NVML_ERROR_INVALID_ARGUMENT;
    *set = calloc(1, sizeof **set);
    if (!*set)
        return NVML_ERROR_MEMORY;
    (*set)->stamp = g_stamp;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    free(set);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types)
{
    RETURN_IF_WITHHELD();
    RETURN_IF_FAILED(check_gpu(device, types));
    *types = FK_EVENT_TYPES;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                      nvmlEventSet_t set)
{
    RETURN_IF_WITHHELD();
    RETURN_IF_FAILED(check_gpu(device, set));
    if (types & ~(unsigned long long)FK_EVENT_TYPES)
        return NVML_ERROR_NOT_SUPPORTED;
    set->types[device->index] |= types;
    return NVML_SUCCESS;
}

/* The next undelivered event of a registered GPU, or NVML_ERROR_TIMEOUT after
 * `timeoutms` (the file is re-read meanwhile, with FAKE_NVML_RELOAD). */
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                 unsigned int timeoutms)
{
    RETURN_IF_WITHHELD();
    if (g_refcount == 0)
        return NVML_ERROR_UNINITIALIZED;
    if (!set || !data)
        return NVML_ERROR_INVALID_ARGUMENT;
    double until = seconds_now() + timeoutms / 1000.0;
    for (;;) {
        RETURN_IF_FAILED(reload_if_changed());
        pthread_mutex_lock(&g_lock);
        if (set->stamp != g_stamp) {
            memset(set->delivered, 0, sizeof set->delivered);
            set->stamp = g_stamp;
        }
        for (unsigned i = 0; i < g_topo.gpu_count; i++) {
            const fk_gpu *gpu = &g_topo.gpus[i];
            while (set->delivered[i] < gpu->event_count) {
                const fk_event *event = &gpu->events[set->delivered[i]++];
                if (!(set->types[i] & event->type))
                    continue;
                *data = (nvmlEventData_t){&g_gpu_handles[i], event->type, event->data,
                                          event->gpu_instance_id, event->compute_instance_id};
                pthread_mutex_unlock(&g_lock);
                return NVML_SUCCESS;
            }
        }
        pthread_mutex_unlock(&g_lock);
        double left = until - seconds_now();
        if (left <= 0)
            return NVML_ERROR_TIMEOUT;
        struct timespec pause = {0, (long)(1e9 * (left < 0.05 ? left : 0.05))};
        nanosleep(&pause, NULL);
    }
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
}
