/*
 * A scriptable fake of NVIDIA's NVML (libnvidia-ml.so.1) for tests on machines without a GPU.
 *
 * Built by tests/harness/fake_nvml.py against the real nvml.h (nvidia-nvml-dev wheel) and loaded by
 * the real pynvml. Every call checks the control file named by $FAKE_NVML_CONTROL and
 * re-reads it when it changed, so a test can change values or inject errors mid-run by
 * rewriting it atomically (a rename: a new inode). Lines:
 *
 *   device_count 2
 *   driver_version 550.54.15
 *   cuda_driver_version 12040
 *   gpu0.name NVIDIA A100-SXM4-40GB      (per GPU: name uuid util mem_util mem_used
 *   gpu0.util 87                          mem_total temp_c power_mw power_limit_mw sm_clock
 *                                         throttle pcie_tx_kbs pcie_rx_kbs cc_major cc_minor
 *                                         proc_pid proc_mem)
 *   error nvmlDeviceGetSamples 3          (that function returns NVML error code 3)
 *
 * GPM and energy, with the ABI of nvml.h:
 *   gpu0.gpm 1                            (nvmlGpmQueryDeviceSupport says yes; default no)
 *   gpu0.gpm2 42.5                        (GPM metric 2, SM utilization, is 42.5 % while set;
 *                                          a metric never scripted answers NOT_SUPPORTED in
 *                                          its own nvmlReturn, the call itself succeeds)
 *   gpu0.gpm_ret13 3                      (metric 13's own nvmlReturn is 3)
 *   gpu0.energy 0                         (no nvmlDeviceGetTotalEnergyConsumption: NOT_SUPPORTED)
 *   gpu0.energy_offset_mj 5000            (the energy counter's value when the library loaded)
 *
 * MIG, with the handles of nvml.h (a MIG device handle is a distinct nvmlDevice_t):
 *   gpu0.mig 2                            (MIG mode on, with MIG devices 0 and 1; their UUIDs
 *                                          are MIG-00000000-0000-0000-0000-0000000000<gpu><mig>,
 *                                          GPU instance id mig+1)
 *   gpu0.mig_mem_total 10737418240        (each MIG device's memory; used: gpu0.mig_mem_used)
 *   gpu0.mig_proc_pid 1234                (a compute process in MIG device 0 of the GPU, or in
 *   gpu0.mig_proc_slot 1                   the one mig_proc_slot names)
 *   gpu0.mig_noperm 1                     (MIG device handles answer NO_PERMISSION)
 * A MIG device handle answers what NVML answers for one: memory, processes, name, UUID,
 * compute capability, its GPU instance and parent; utilization, power, temperature, clocks,
 * throttle reasons, PCIe and energy are NOT_SUPPORTED (they belong to the whole GPU), and
 * its GPM samples come from nvmlGpmMigSampleGet on the parent with its GPU instance id.
 *
 * Counters are integrated over time as a GPU's are: the energy counter grows by power_mw x
 * seconds (mJ) and each GPM metric's counter by value x seconds, with the values in force
 * at each moment (a control-file change counts from the file's mtime, whenever the fake
 * next looks at it).
 * nvmlGpmMetricsGet gives (counter2 - counter1) / (t2 - t1) per metric. Two samples less
 * than 100 ms apart hold the same counters (the GPU refreshes them every 100 ms): every
 * metric then reads 0 with NVML_SUCCESS, the fake zero a careless reader would report.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>

#include "nvml.h"

#define MAX_GPUS 8
#define MAX_ERRORS 32
#define TEXT 96
#define GPM_IDS 64 /* metric ids the fake can script (all the agent reads are below 64) */
#define GPM_REFRESH_S 0.1
#define MAX_MIG 7

typedef struct {
    char name[TEXT], uuid[TEXT];
    unsigned long long util, mem_util, mem_used, mem_total, temp_c, power_mw, power_limit_mw;
    unsigned long long sm_clock, throttle, pcie_tx_kbs, pcie_rx_kbs, proc_pid, proc_mem;
    int cc_major, cc_minor;
    int gpm, energy;
    unsigned long long energy_offset_mj;
    int mig, mig_noperm;
    unsigned long long mig_mem_total, mig_mem_used, mig_proc_pid, mig_proc_slot;
    int gpm_set[GPM_IDS], gpm_ret[GPM_IDS];
    double gpm_value[GPM_IDS];
} FakeGpu;

/* Time-integrated counters, kept across control-file changes (the GPU's, not the script's). */
typedef struct {
    double energy_mj;
    double gpm[GPM_IDS];
} Counters;

static Counters counters[MAX_GPUS];
static double counters_at = -1.0;

typedef struct {
    int device_count, cuda_driver_version, error_count;
    char driver_version[TEXT];
    char error_function[MAX_ERRORS][TEXT];
    int error_code[MAX_ERRORS];
    FakeGpu gpus[MAX_GPUS];
} FakeState;

struct nvmlDevice_st { int index, mig; /* mig: -1 for the whole GPU */ };

static struct nvmlDevice_st handles[MAX_GPUS];
static struct nvmlDevice_st mig_handles[MAX_GPUS][MAX_MIG];
static FakeState state;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized = 0;

static void defaults(void) {
    memset(&state, 0, sizeof(state));
    state.device_count = 1;
    state.cuda_driver_version = 12040;
    strcpy(state.driver_version, "550.54.15");
    for (int i = 0; i < MAX_GPUS; i++) {
        FakeGpu *g = &state.gpus[i];
        snprintf(g->name, TEXT, "Fake GPU %d", i);
        snprintf(g->uuid, TEXT, "GPU-00000000-0000-0000-0000-00000000000%d", i);
        g->util = 50; g->mem_util = 20; g->mem_total = 16ULL << 30; g->mem_used = 1ULL << 30;
        g->temp_c = 60; g->power_mw = 150000; g->power_limit_mw = 300000; g->sm_clock = 1500;
        g->pcie_tx_kbs = 1000; g->pcie_rx_kbs = 2000; g->cc_major = 8; g->cc_minor = 0;
        g->energy = 1; g->energy_offset_mj = 987654321ULL;
        g->mig_mem_total = 10ULL << 30; g->mig_mem_used = 1ULL << 28;
        handles[i].index = i;
        handles[i].mig = -1;
        for (int j = 0; j < MAX_MIG; j++) {
            mig_handles[i][j].index = i;
            mig_handles[i][j].mig = j;
        }
    }
}

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Integrate every GPU's counters up to `now` (monotonic seconds) with the values in force;
 * under the lock. */
static void advance_to(double now) {
    if (counters_at >= 0 && now > counters_at) {
        double dt = now - counters_at;
        for (int i = 0; i < MAX_GPUS; i++) {
            FakeGpu *g = &state.gpus[i];
            counters[i].energy_mj += (double)g->power_mw * dt;
            for (int id = 0; id < GPM_IDS; id++)
                if (g->gpm_set[id]) counters[i].gpm[id] += g->gpm_value[id] * dt;
        }
    }
    if (now > counters_at) counters_at = now;
}

static void advance(void) { advance_to(monotonic_s()); }

/* The monotonic time a file was changed at (its mtime, on the realtime clock). */
static double changed_at(const struct stat *st) {
    struct timespec real;
    clock_gettime(CLOCK_REALTIME, &real);
    double ago = ((double)real.tv_sec + (double)real.tv_nsec / 1e9) -
                 ((double)st->st_mtim.tv_sec + (double)st->st_mtim.tv_nsec / 1e9);
    double now = monotonic_s();
    return ago > 0 ? now - ago : now;
}

static void set_gpu(FakeGpu *g, const char *key, const char *value) {
    unsigned long long v = strtoull(value, NULL, 10);
    if (!strncmp(key, "gpm_ret", 7)) {
        int id = atoi(key + 7);
        if (id > 0 && id < GPM_IDS) g->gpm_ret[id] = (int)v;
        return;
    }
    if (!strncmp(key, "gpm", 3) && key[3] >= '0' && key[3] <= '9') {
        int id = atoi(key + 3);
        if (id > 0 && id < GPM_IDS) {
            g->gpm_set[id] = 1;
            g->gpm_value[id] = strtod(value, NULL);
        }
        return;
    }
    if (!strcmp(key, "name")) snprintf(g->name, TEXT, "%.95s", value);
    else if (!strcmp(key, "uuid")) snprintf(g->uuid, TEXT, "%.95s", value);
    else if (!strcmp(key, "util")) g->util = v;
    else if (!strcmp(key, "mem_util")) g->mem_util = v;
    else if (!strcmp(key, "mem_used")) g->mem_used = v;
    else if (!strcmp(key, "mem_total")) g->mem_total = v;
    else if (!strcmp(key, "temp_c")) g->temp_c = v;
    else if (!strcmp(key, "power_mw")) g->power_mw = v;
    else if (!strcmp(key, "power_limit_mw")) g->power_limit_mw = v;
    else if (!strcmp(key, "sm_clock")) g->sm_clock = v;
    else if (!strcmp(key, "throttle")) g->throttle = v;
    else if (!strcmp(key, "pcie_tx_kbs")) g->pcie_tx_kbs = v;
    else if (!strcmp(key, "pcie_rx_kbs")) g->pcie_rx_kbs = v;
    else if (!strcmp(key, "proc_pid")) g->proc_pid = v;
    else if (!strcmp(key, "proc_mem")) g->proc_mem = v;
    else if (!strcmp(key, "cc_major")) g->cc_major = (int)v;
    else if (!strcmp(key, "cc_minor")) g->cc_minor = (int)v;
    else if (!strcmp(key, "gpm")) g->gpm = (int)v;
    else if (!strcmp(key, "energy")) g->energy = (int)v;
    else if (!strcmp(key, "energy_offset_mj")) g->energy_offset_mj = v;
    else if (!strcmp(key, "mig")) g->mig = (int)(v > MAX_MIG ? MAX_MIG : v);
    else if (!strcmp(key, "mig_noperm")) g->mig_noperm = (int)v;
    else if (!strcmp(key, "mig_mem_total")) g->mig_mem_total = v;
    else if (!strcmp(key, "mig_mem_used")) g->mig_mem_used = v;
    else if (!strcmp(key, "mig_proc_pid")) g->mig_proc_pid = v;
    else if (!strcmp(key, "mig_proc_slot")) g->mig_proc_slot = v;
}

/* The control file last parsed: parsing it on every call would make the fake cost several
 * times what the code under test does, in benchmarks that time the sampler. */
static struct { char path[4096]; dev_t dev; ino_t ino; off_t size; struct timespec mtime; } loaded;

static int unchanged(const char *path, const struct stat *st) {
    return !strcmp(loaded.path, path) && loaded.dev == st->st_dev && loaded.ino == st->st_ino &&
           loaded.size == st->st_size && loaded.mtime.tv_sec == st->st_mtim.tv_sec &&
           loaded.mtime.tv_nsec == st->st_mtim.tv_nsec;
}

/* Re-read the control file when it changed; called at the start of every API function, under
 * the lock. */
static void load(void) {
    const char *path = getenv("FAKE_NVML_CONTROL");
    struct stat st;
    double change = -1.0;
    if (path && strlen(path) < sizeof loaded.path && !stat(path, &st)) {
        if (unchanged(path, &st)) return;
        change = changed_at(&st);
        strcpy(loaded.path, path);
        loaded.dev = st.st_dev; loaded.ino = st.st_ino; loaded.size = st.st_size;
        loaded.mtime = st.st_mtim;
    } else {
        loaded.path[0] = 0;
    }
    /* The old values were in force until the file changed, the new ones since. */
    if (change >= 0) advance_to(change);
    else advance();
    defaults();
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return;
    char line[512], key[TEXT], value[400];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (sscanf(line, "%95s %399[^\n]", key, value) != 2) continue;
        if (!strcmp(key, "device_count")) state.device_count = atoi(value);
        else if (!strcmp(key, "driver_version")) snprintf(state.driver_version, TEXT, "%.95s", value);
        else if (!strcmp(key, "cuda_driver_version")) state.cuda_driver_version = atoi(value);
        else if (!strcmp(key, "error") && state.error_count < MAX_ERRORS) {
            char function[TEXT];
            int code;
            if (sscanf(value, "%95s %d", function, &code) == 2) {
                strcpy(state.error_function[state.error_count], function);
                state.error_code[state.error_count++] = code;
            }
        } else if (!strncmp(key, "gpu", 3)) {
            char *dot = strchr(key, '.');
            int index = atoi(key + 3);
            if (dot && index >= 0 && index < MAX_GPUS) set_gpu(&state.gpus[index], dot + 1, value);
        }
    }
    fclose(f);
    if (state.device_count > MAX_GPUS) state.device_count = MAX_GPUS;
    advance();
}

static nvmlReturn_t injected(const char *function) {
    for (int i = 0; i < state.error_count; i++)
        if (!strcmp(state.error_function[i], function)) return (nvmlReturn_t)state.error_code[i];
    return NVML_SUCCESS;
}

/* Lock, reload, check init and injected errors; sets `gpu` when a device is given. */
#define ENTER(device)                                                        \
    pthread_mutex_lock(&lock);                                               \
    load();                                                                  \
    nvmlReturn_t rc = injected(__func__);                                    \
    FakeGpu *gpu = NULL;                                                     \
    int mig = -1;                                                            \
    if (rc == NVML_SUCCESS && !initialized) rc = NVML_ERROR_UNINITIALIZED;   \
    if (rc == NVML_SUCCESS && (device) != NULL) {                            \
        int i_ = ((struct nvmlDevice_st *)(device))->index;                  \
        mig = ((struct nvmlDevice_st *)(device))->mig;                       \
        if (i_ < 0 || i_ >= state.device_count) rc = NVML_ERROR_INVALID_ARGUMENT; \
        else gpu = &state.gpus[i_];                                          \
        if (gpu && mig >= 0 && mig >= gpu->mig) rc = NVML_ERROR_INVALID_ARGUMENT; \
        else if (gpu && mig >= 0 && gpu->mig_noperm) rc = NVML_ERROR_NO_PERMISSION; \
    }                                                                        \
    if (rc != NVML_SUCCESS) { pthread_mutex_unlock(&lock); return rc; }      \
    (void)gpu; (void)mig;

/* What belongs to the whole GPU: a MIG device handle answers NOT_SUPPORTED. */
#define WHOLE_GPU_ONLY() if (mig >= 0) LEAVE(NVML_ERROR_NOT_SUPPORTED)

#define LEAVE(code) do { pthread_mutex_unlock(&lock); return (code); } while (0)

static nvmlReturn_t copy_text(char *out, unsigned int length, const char *text) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, text);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    pthread_mutex_lock(&lock);
    load();
    nvmlReturn_t rc = injected("nvmlInitWithFlags");
    if (rc == NVML_SUCCESS) initialized++;
    pthread_mutex_unlock(&lock);
    return rc;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    pthread_mutex_lock(&lock);
    nvmlReturn_t rc = initialized ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
    if (initialized) initialized--;
    pthread_mutex_unlock(&lock);
    return rc;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    ENTER(NULL);
    LEAVE(copy_text(version, length, state.driver_version));
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    ENTER(NULL);
    *cudaDriverVersion = state.cuda_driver_version;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    ENTER(NULL);
    *cudaDriverVersion = state.cuda_driver_version;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    ENTER(NULL);
    *deviceCount = (unsigned int)state.device_count;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    ENTER(NULL);
    if (index >= (unsigned int)state.device_count) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *device = &handles[index];
    LEAVE(NVML_SUCCESS);
}

static void mig_uuid(char *out, int gpu, int mig) {
    snprintf(out, TEXT, "MIG-00000000-0000-0000-0000-0000000000%d%d", gpu, mig);
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    ENTER(NULL);
    char text[TEXT];
    for (int i = 0; i < state.device_count; i++) {
        if (!strcmp(state.gpus[i].uuid, uuid)) {
            *device = &handles[i];
            LEAVE(NVML_SUCCESS);
        }
        for (int j = 0; j < state.gpus[i].mig; j++) {
            mig_uuid(text, i, j);
            if (!strcmp(text, uuid)) {
                if (state.gpus[i].mig_noperm) LEAVE(NVML_ERROR_NO_PERMISSION);
                *device = &mig_handles[i][j];
                LEAVE(NVML_SUCCESS);
            }
        }
    }
    LEAVE(NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                  unsigned int *pendingMode) {
    ENTER(device);
    WHOLE_GPU_ONLY();
    *currentMode = *pendingMode = gpu->mig ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    ENTER(device);
    WHOLE_GPU_ONLY();
    *count = gpu->mig ? MAX_MIG : 0;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *migDevice) {
    ENTER(device);
    WHOLE_GPU_ONLY();
    if (!gpu->mig) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (index >= MAX_MIG) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (index >= (unsigned int)gpu->mig) LEAVE(NVML_ERROR_NOT_FOUND);
    if (gpu->mig_noperm) LEAVE(NVML_ERROR_NO_PERMISSION);
    *migDevice = &mig_handles[device->index][index];
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    ENTER(device);
    *isMigDevice = mig >= 0;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                          nvmlDevice_t *device) {
    ENTER(migDevice);
    if (mig < 0) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *device = &handles[migDevice->index];
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    ENTER(device);
    if (mig < 0) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *id = (unsigned int)mig + 1;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    ENTER(device);
    *index = (unsigned int)device->index;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    ENTER(device);
    if (mig >= 0) {
        char text[TEXT + 16];
        snprintf(text, sizeof text, "%s MIG 1g.10gb", gpu->name);
        LEAVE(copy_text(name, length, text));
    }
    LEAVE(copy_text(name, length, gpu->name));
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    ENTER(device);
    if (mig >= 0) {
        char text[TEXT];
        mig_uuid(text, device->index, mig);
        LEAVE(copy_text(uuid, length, text));
    }
    LEAVE(copy_text(uuid, length, gpu->uuid));
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    ENTER(device);
    unsigned long long total = mig >= 0 ? gpu->mig_mem_total : gpu->mem_total;
    unsigned long long used = mig >= 0 ? gpu->mig_mem_used : gpu->mem_used;
    memory->total = total;
    memory->used = used;
    memory->free = total > used ? total - used : 0;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    ENTER(device);
    unsigned long long total = mig >= 0 ? gpu->mig_mem_total : gpu->mem_total;
    unsigned long long used = mig >= 0 ? gpu->mig_mem_used : gpu->mem_used;
    memory->total = total;
    memory->used = used;
    memory->reserved = 0;
    memory->free = total > used ? total - used : 0;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    ENTER(device);
    WHOLE_GPU_ONLY();
    utilization->gpu = (unsigned int)gpu->util;
    utilization->memory = (unsigned int)gpu->mem_util;
    LEAVE(NVML_SUCCESS);
}

/* Samples every 100 ms after lastSeenTimeStamp (at most 10), each with the current value. */
nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type,
                                  unsigned long long lastSeenTimeStamp,
                                  nvmlValueType_t *sampleValType, unsigned int *sampleCount,
                                  nvmlSample_t *samples) {
    ENTER(device);
    WHOLE_GPU_ONLY();
    unsigned long long value;
    if (type == NVML_GPU_UTILIZATION_SAMPLES) value = gpu->util;
    else if (type == NVML_MEMORY_UTILIZATION_SAMPLES) value = gpu->mem_util;
    else LEAVE(NVML_ERROR_NOT_SUPPORTED);
    struct timeval tv;
    gettimeofday(&tv, NULL);
    unsigned long long now = (unsigned long long)tv.tv_sec * 1000000ULL + tv.tv_usec;
    unsigned long long step = 100000ULL, first = now - 9 * step;
    if (lastSeenTimeStamp >= first) first = lastSeenTimeStamp + 1;
    unsigned int count = first > now ? 0 : (unsigned int)((now - first) / step) + 1;
    if (count == 0) LEAVE(NVML_ERROR_NOT_FOUND);
    *sampleValType = NVML_VALUE_TYPE_UNSIGNED_INT;
    if (samples == NULL) {
        *sampleCount = count;
        LEAVE(NVML_SUCCESS);
    }
    if (*sampleCount < count) count = *sampleCount;
    for (unsigned int i = 0; i < count; i++) {
        samples[i].timeStamp = now - (unsigned long long)(count - 1 - i) * step;
        samples[i].sampleValue.uiVal = (unsigned int)value;
    }
    *sampleCount = count;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int *temp) {
    ENTER(device);
    WHOLE_GPU_ONLY();
    if (sensorType != NVML_TEMPERATURE_GPU) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    *temp = (unsigned int)gpu->temp_c;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    ENTER(device);
    WHOLE_GPU_ONLY();
    *power = (unsigned int)gpu->power_mw;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit) {
    ENTER(device);
    WHOLE_GPU_ONLY();
    *limit = (unsigned int)gpu->power_limit_mw;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type,
                                    unsigned int *clock) {
    ENTER(device);
    WHOLE_GPU_ONLY();
    if (type != NVML_CLOCK_SM) LEAVE(NVML_ERROR_NOT_SUPPORTED);
    *clock = (unsigned int)gpu->sm_clock;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                    unsigned long long *clocksEventReasons) {
    ENTER(device);
    WHOLE_GPU_ONLY();
    *clocksEventReasons = gpu->throttle;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter,
                                         unsigned int *value) {
    ENTER(device);
    WHOLE_GPU_ONLY();
    *value = (unsigned int)(counter == NVML_PCIE_UTIL_TX_BYTES ? gpu->pcie_tx_kbs
                                                               : gpu->pcie_rx_kbs);
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos) {
    ENTER(device);
    unsigned long long pid = mig < 0 ? gpu->proc_pid
                             : (unsigned long long)mig == gpu->mig_proc_slot ? gpu->mig_proc_pid
                                                                            : 0;
    unsigned int count = pid ? 1 : 0;
    if (infos == NULL || *infoCount < count) {
        *infoCount = count;
        LEAVE(count ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS);
    }
    if (count) {
        infos[0].pid = (unsigned int)pid;
        infos[0].usedGpuMemory = mig >= 0 ? gpu->mig_mem_used : gpu->proc_mem;
        infos[0].gpuInstanceId = mig >= 0 ? (unsigned int)mig + 1 : 0xFFFFFFFF;
        infos[0].computeInstanceId = mig >= 0 ? 0 : 0xFFFFFFFF;
    }
    *infoCount = count;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    ENTER(device);
    *major = gpu->cc_major;
    *minor = gpu->cc_minor;
    LEAVE(NVML_SUCCESS);
}

/* ---- energy ---------------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy) {
    ENTER(device);
    WHOLE_GPU_ONLY();
    if (!energy) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (!gpu->energy) LEAVE(NVML_ERROR_NOT_SUPPORTED);
    advance();
    *energy = gpu->energy_offset_mj + (unsigned long long)counters[device->index].energy_mj;
    LEAVE(NVML_SUCCESS);
}

/* ---- GPM ------------------------------------------------------------------------------- */

#define SAMPLE_MAGIC 0x47504d53 /* "GPMS" */

struct nvmlGpmSample_st {
    int magic, device, filled;
    double t;
    double gpm[GPM_IDS];
};

static const char *metric_name(unsigned int id) {
    switch (id) {
    case NVML_GPM_METRIC_SM_UTIL: return "sm_util";
    case NVML_GPM_METRIC_SM_OCCUPANCY: return "sm_occupancy";
    case NVML_GPM_METRIC_ANY_TENSOR_UTIL: return "any_tensor_util";
    case NVML_GPM_METRIC_DRAM_BW_UTIL: return "dram_bw_util";
    case NVML_GPM_METRIC_FP32_UTIL: return "fp32_util";
    case NVML_GPM_METRIC_FP16_UTIL: return "fp16_util";
    default: return NULL;
    }
}

static char percent_unit[] = "%";

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *gpmSupport) {
    ENTER(device);
    WHOLE_GPU_ONLY();
    if (!gpmSupport) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (gpmSupport->version != NVML_GPM_SUPPORT_VERSION) LEAVE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    gpmSupport->isSupportedDevice = gpu->gpm ? 1 : 0;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *gpmSample) {
    ENTER(NULL);
    if (!gpmSample) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    struct nvmlGpmSample_st *sample = calloc(1, sizeof *sample);
    if (!sample) LEAVE(NVML_ERROR_MEMORY);
    sample->magic = SAMPLE_MAGIC;
    sample->device = -1;
    *gpmSample = sample;
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t gpmSample) {
    ENTER(NULL);
    if (!gpmSample || gpmSample->magic != SAMPLE_MAGIC) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    gpmSample->magic = 0;
    free(gpmSample);
    LEAVE(NVML_SUCCESS);
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t gpmSample) {
    ENTER(device);
    WHOLE_GPU_ONLY();
    if (!gpmSample || gpmSample->magic != SAMPLE_MAGIC) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (!gpu->gpm) LEAVE(NVML_ERROR_NOT_SUPPORTED);
    advance();
    gpmSample->device = device->index;
    gpmSample->filled = 1;
    gpmSample->t = counters_at;
    memcpy(gpmSample->gpm, counters[device->index].gpm, sizeof gpmSample->gpm);
    LEAVE(NVML_SUCCESS);
}

/* A MIG device's GPM sample, from its parent GPU and GPU instance id (the fake's MIG devices
 * share their parent's scripted counters). */
nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId,
                                 nvmlGpmSample_t gpmSample) {
    {
        ENTER(device);
        if (mig >= 0) LEAVE(NVML_ERROR_INVALID_ARGUMENT); /* the parent's handle is asked for */
        if (gpuInstanceId == 0 || gpuInstanceId > (unsigned int)gpu->mig)
            LEAVE(NVML_ERROR_NOT_FOUND);
        if (gpu->mig_noperm) LEAVE(NVML_ERROR_NO_PERMISSION);
        pthread_mutex_unlock(&lock);
    }
    return nvmlGpmSampleGet(device, gpmSample);
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *metricsGet) {
    ENTER(NULL);
    if (!metricsGet) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    if (metricsGet->version != NVML_GPM_METRICS_GET_VERSION)
        LEAVE(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    /* The caller's array may be longer than this header's (bindings grew it): only the first
     * numMetrics entries are read or written. */
    if (metricsGet->numMetrics == 0 || metricsGet->numMetrics > NVML_GPM_METRIC_MAX)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    struct nvmlGpmSample_st *s1 = metricsGet->sample1, *s2 = metricsGet->sample2;
    if (!s1 || !s2 || s1->magic != SAMPLE_MAGIC || s2->magic != SAMPLE_MAGIC || !s1->filled ||
        !s2->filled || s1->device != s2->device)
        LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    double dt = s2->t - s1->t;
    if (dt < 0) LEAVE(NVML_ERROR_INVALID_ARGUMENT);
    FakeGpu *g = &state.gpus[s1->device];
    for (unsigned int i = 0; i < metricsGet->numMetrics; i++) {
        nvmlGpmMetric_t *m = &metricsGet->metrics[i];
        unsigned int id = m->metricId;
        m->value = 0.0;
        m->metricInfo.shortName = m->metricInfo.longName = m->metricInfo.unit = NULL;
        if (id == 0 || id >= GPM_IDS || !g->gpm_set[id]) {
            m->nvmlReturn = id < NVML_GPM_METRIC_MAX ? NVML_ERROR_NOT_SUPPORTED
                                                     : NVML_ERROR_INVALID_ARGUMENT;
            continue;
        }
        if (g->gpm_ret[id]) {
            m->nvmlReturn = (nvmlReturn_t)g->gpm_ret[id];
            continue;
        }
        m->nvmlReturn = NVML_SUCCESS;
        m->metricInfo.shortName = m->metricInfo.longName = (char *)metric_name(id);
        m->metricInfo.unit = percent_unit;
        if (dt >= GPM_REFRESH_S) m->value = (s2->gpm[id] - s1->gpm[id]) / dt;
    }
    LEAVE(NVML_SUCCESS);
}
