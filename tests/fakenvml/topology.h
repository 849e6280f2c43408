/* Fake GPU topology shared by the fake libnvidia-ml and libcuda.
 * See README.md in this directory for the JSON format. */
#ifndef FAKE_TOPOLOGY_H
#define FAKE_TOPOLOGY_H

#include <stdbool.h>
#include <stddef.h>

#pragma GCC visibility push(hidden)

#define FK_MAX_GPUS 64
#define FK_MAX_MIGS 8   /* MIG devices per GPU (A100/H100 allow 7) */
#define FK_MAX_PROCS 32 /* processes per list */
#define FK_UUID_LEN 96
#define FK_NAME_LEN 96
#define FK_MAX_MISSING 16 /* "missing_symbols" */
#define FK_MAX_EVENTS 16 /* "events" per GPU */

#define FK_TOPOLOGY_ENV "FAKE_NVML_TOPOLOGY"
#define FK_TOPOLOGY_BESIDE_LIB "fake-nvml-topology.json"
#define FK_RELOAD_ENV "FAKE_NVML_RELOAD" /* non-empty: re-read a changed file while open */

typedef struct {
    unsigned domain, bus, device, function;
} fk_pci;

typedef struct {
    unsigned pid;
    unsigned long long used_memory_mib;
    char name[64]; /* for nvmlSystemGetProcessName; may be empty */
} fk_process;

typedef struct {
    unsigned count;
    fk_process list[FK_MAX_PROCS];
} fk_process_list;

typedef struct {
    unsigned long long type; /* nvmlEventType*: XidCriticalError, DoubleBitEccError */
    unsigned long long data; /* the Xid */
    unsigned gpu_instance_id, compute_instance_id; /* 0xFFFFFFFF outside MIG */
} fk_event;

typedef struct {
    char uuid[FK_UUID_LEN];
    char profile[32]; /* e.g. "1g.5gb"; may be empty */
    unsigned long long memory_total_mib, memory_used_mib;
    unsigned multiprocessor_count;
    unsigned gpu_instance_id, compute_instance_id;
    fk_process_list processes;
} fk_mig;

typedef struct {
    char uuid[FK_UUID_LEN];
    char name[FK_NAME_LEN];
    fk_pci pci;
    unsigned pci_device_id, pci_subsystem_id;
    unsigned long long memory_total_mib, memory_used_mib;
    unsigned long long cuda_memory_total_mib; /* CUDA's total: NVML's less what the driver keeps */
    int cc_major, cc_minor;
    unsigned utilization_gpu, utilization_memory; /* percent */
    bool sensors_supported; /* false: temperature and power are NOT_SUPPORTED */
    unsigned temperature_c, power_mw;
    unsigned minor_number;
    unsigned multiprocessor_count;
    bool persistence_mode;
    unsigned long long energy_mj; /* the total-energy counter at load; grows with power */
    unsigned long long throttle_reasons; /* nvmlClocksEventReason* bits */
    bool retired_pages_pending;
    unsigned remapped_correctable, remapped_uncorrectable;
    bool remap_pending, remap_failure;
    long long ecc_uncorrected; /* volatile double-bit count; -1: not supported */
    unsigned event_count;
    fk_event events[FK_MAX_EVENTS];
    bool mig_supported, mig_mode;
    unsigned max_mig_devices;
    unsigned mig_count;
    fk_mig migs[FK_MAX_MIGS];
    fk_process_list compute_processes, graphics_processes;
    bool lost; /* "error": "gpu_is_lost" */
    int process_query_error; /* "process_query_error": an nvmlReturn_t, 0 for none */
} fk_gpu;

typedef enum {
    FK_INIT_OK,
    FK_INIT_DRIVER_NOT_LOADED,
    FK_INIT_LIBRARY_NOT_FOUND,
    FK_INIT_NO_PERMISSION,
    FK_INIT_LIB_RM_VERSION_MISMATCH,
} fk_init_error;

typedef struct {
    char driver_version[80];
    int cuda_driver_version; /* e.g. 12040 */
    fk_init_error init_error;
    unsigned gpu_count;
    fk_gpu gpus[FK_MAX_GPUS]; /* sorted by PCI bus id */
    unsigned missing_count;
    char missing[FK_MAX_MISSING][80]; /* functions that answer FUNCTION_NOT_FOUND */
    unsigned denied_count;
    char denied[FK_MAX_MISSING][80]; /* functions that answer NO_PERMISSION */
} fk_topology;

/* Whether the topology's "missing_symbols" lists `name`. */
bool fk_missing(const fk_topology *topo, const char *name);

/* Whether the topology's "denied_symbols" lists `name`. */
bool fk_denied(const fk_topology *topo, const char *name);

/* Finds and reads the topology: $FAKE_NVML_TOPOLOGY, else
 * fake-nvml-topology.json in the directory of the shared object containing
 * `anchor`, else an empty topology (driver loaded, zero GPUs).
 * Returns false for a malformed or unreadable file, after printing
 * "<tag>: <why>" on stderr. */
bool fk_topology_load(fk_topology *topo, const char *tag, const void *anchor);

/* The modification time (ns) of the topology file the next load would read; 0 when
 * there is none. */
long long fk_topology_stamp(const void *anchor);

/* Accepts "00000000:81:00.0", "0000:81:00.0" and "81:00.0" (any hex case). */
bool fk_parse_pci(const char *text, fk_pci *out);
int fk_pci_compare(const fk_pci *a, const fk_pci *b);

/* The 16 raw bytes of a "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" or
 * "MIG-..." UUID; UUIDs without 32 hex digits get a stable hash instead. */
void fk_uuid_bytes(const char *uuid, unsigned char out[16]);

#pragma GCC visibility pop

#endif
