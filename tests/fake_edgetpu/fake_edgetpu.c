/* A stand-in Edge TPU library for tests and scripts (no Google code, no hardware).

   It exports what edgeapp uses of libedgetpu: the TFLite external delegate ABI
   (tflite_plugin_create_delegate / tflite_plugin_destroy_delegate), edgetpu_version() and
   edgetpu_list_devices() from edgetpu_c.h. Its delegate claims every `edgetpu-custom-op` node
   and "runs" it: each output's bytes are a deterministic function of all input bytes (an FNV-1a
   hash of the inputs seeds an xorshift stream per output), so the same input gives the same
   output on every device, and a different input a different output.

   Configuration, read when a delegate is created (so one process can change it between runs):
     FAKE_EDGETPU_DEVICES   comma list of device types, e.g. "usb,usb,pci" (default "usb"; "none"
                            for no device): they are usb:0, usb:1, pci:0 as libedgetpu numbers them.
     FAKE_EDGETPU_DELAY_MS  time each invoke takes, in milliseconds (default 0); slept without
                            holding anything, like a real accelerator working.
     FAKE_EDGETPU_FAIL      "usb:1@3,pci:0@0": a delegate on that device fails every invoke after
                            its first 3 (as an unplugged accelerator does); @0 fails at once.
     FAKE_EDGETPU_LOG       a file to append "create <device> <pid>" lines to.
     FAKE_EDGETPU_OPTIONS   a file to append one line per delegate created: the device it opened,
                            then every option it was given as key=value, in the order given
                            ("usb:0 device=usb:0 Performance=Max"). As libedgetpu does, an invalid
                            `Performance` (Low|Medium|High|Max) or `Usb.MaxBulkInQueueLength`
                            (0..255) makes the delegate fail.
     FAKE_EDGETPU_DELAY_STEP_MS  added to a delegate's delay after each of its invokes (a device
                            that slows down as it heats up).
     FAKE_EDGETPU_UNPLUG    "usb:0@3/2": after 3 invokes that device is unplugged once: invokes
                            fail, it leaves the device list, and the next 2 attempts to open it
                            fail; then it is back (re-enumerated) for good. "/-1": never back.
                            Anything after a '#' only tells one configuration from the next.

   The structs below are the prefixes of TensorFlow Lite's tensorflow/lite/core/c/common.h that
   a delegate touches; their order is "semi-ABI stable" (fields are only appended). A layout
   mismatch is detected at prepare time (tensor byte sizes checked against dims) and reported
   as an error instead of reading garbage. */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef int TfLiteStatus; /* kTfLiteOk = 0, kTfLiteError = 1 */
typedef struct { int size; int data[]; } TfLiteIntArray;
typedef struct { float scale; int32_t zero_point; } TfLiteQuantizationParams;
typedef struct { int type; void* params; } TfLiteQuantization;

typedef struct TfLiteTensor {
  int type;
  void* data;
  TfLiteIntArray* dims;
  TfLiteQuantizationParams params;
  int allocation_type;
  size_t bytes;
  const void* allocation;
  const char* name;
  void* delegate;
  int buffer_handle;
  _Bool data_is_stale;
  _Bool is_variable;
  TfLiteQuantization quantization;
  void* sparsity;
  const TfLiteIntArray* dims_signature;
} TfLiteTensor;

typedef struct TfLiteNode {
  TfLiteIntArray* inputs;
  TfLiteIntArray* outputs;
  TfLiteIntArray* intermediates;
  TfLiteIntArray* temporaries;
  void* user_data;
  void* builtin_data;
  const void* custom_initial_data;
  int custom_initial_data_size;
  void* delegate;
  _Bool might_have_side_effect;
} TfLiteNode;

struct TfLiteContext;
struct TfLiteDelegate;

typedef struct TfLiteRegistration {
  void* (*init)(struct TfLiteContext*, const char*, size_t);
  void (*free)(struct TfLiteContext*, void*);
  TfLiteStatus (*prepare)(struct TfLiteContext*, TfLiteNode*);
  TfLiteStatus (*invoke)(struct TfLiteContext*, TfLiteNode*);
  const char* (*profiling_string)(const struct TfLiteContext*, const TfLiteNode*);
  int32_t builtin_code;
  const char* custom_name;
  int version;
  void* registration_external;
  void* async_kernel;
  uint64_t inplace_operator;
  void* reserved[8]; /* passed by value: a larger struct is safe, a smaller one is not */
} TfLiteRegistration;

typedef struct TfLiteContext {
  size_t tensors_size;
  TfLiteStatus (*GetExecutionPlan)(struct TfLiteContext*, TfLiteIntArray**);
  TfLiteTensor* tensors;
  void* impl_;
  TfLiteStatus (*ResizeTensor)(struct TfLiteContext*, TfLiteTensor*, TfLiteIntArray*);
  void (*ReportError)(struct TfLiteContext*, const char*, ...);
  TfLiteStatus (*AddTensors)(struct TfLiteContext*, int, int*);
  TfLiteStatus (*GetNodeAndRegistration)(struct TfLiteContext*, int, TfLiteNode**,
                                         TfLiteRegistration**);
  TfLiteStatus (*ReplaceNodeSubsetsWithDelegateKernels)(struct TfLiteContext*, TfLiteRegistration,
                                                        const TfLiteIntArray*,
                                                        struct TfLiteDelegate*);
} TfLiteContext;

typedef struct TfLiteDelegate {
  void* data_;
  TfLiteStatus (*Prepare)(TfLiteContext*, struct TfLiteDelegate*);
  void* CopyFromBufferHandle;
  void* CopyToBufferHandle;
  void* FreeBufferHandle;
  int64_t flags;
  void* opaque_delegate_builder;
} TfLiteDelegate;

typedef struct {
  TfLiteDelegate* delegate;
  TfLiteIntArray* nodes_to_replace;
  TfLiteIntArray* input_tensors;
  TfLiteIntArray* output_tensors;
} TfLiteDelegateParams;

enum { kTfLiteFloat32 = 1, kTfLiteInt32 = 2, kTfLiteUInt8 = 3, kTfLiteInt64 = 4, kTfLiteInt16 = 7,
       kTfLiteInt8 = 9 };
enum { kBuiltinDelegate = 51, kMaxDevices = 64 };

/* ------------------------------------------------------------------------------ devices */

struct edgetpu_device { int type; const char* path; }; /* edgetpu_c.h: type 0 PCI, 1 USB */

static struct edgetpu_device listed[kMaxDevices];
static char paths[kMaxDevices][64];

static int read_devices(int types[kMaxDevices]) {
  const char* spec = getenv("FAKE_EDGETPU_DEVICES");
  char buf[512];
  int n = 0;
  snprintf(buf, sizeof buf, "%s", spec && *spec ? spec : "usb");
  for (char* tok = strtok(buf, ","); tok && n < kMaxDevices; tok = strtok(NULL, ",")) {
    if (strcmp(tok, "usb") == 0) types[n++] = 1;
    else if (strcmp(tok, "pci") == 0) types[n++] = 0;
  }
  return n;
}

/* libedgetpu's numbering: usb:N and pci:N count within a type, :N over all devices. */
static void device_name(const int* types, int index, char* out, size_t size) {
  int nth = 0;
  for (int i = 0; i < index; i++) nth += types[i] == types[index];
  snprintf(out, size, "%s:%d", types[index] == 1 ? "usb" : "pci", nth);
}

static int resolve(const char* option, const int* types, int count) {
  if (count == 0) return -1;
  if (!option || !*option) return 0;
  int want_type = -1, nth = 0;
  const char* colon = strchr(option, ':');
  size_t kind_len = colon ? (size_t)(colon - option) : strlen(option);
  if (kind_len == 3 && strncmp(option, "usb", 3) == 0) want_type = 1;
  else if (kind_len == 3 && strncmp(option, "pci", 3) == 0) want_type = 0;
  else if (kind_len != 0) return -1;
  if (colon) nth = atoi(colon + 1);
  if (want_type < 0) return nth < count ? nth : -1;
  for (int i = 0; i < count; i++)
    if (types[i] == want_type && nth-- == 0) return i;
  return -1;
}

/* ------------------------------------------------------------------------------ unplugging */

/* One unplug per configuration string: armed (0), gone (1), back (2). */
static char unplug_spec[256];
static char unplug_name[16];
static long unplug_after_invokes = -1, unplug_absent = 0;
static int unplug_state = 0;

static void unplug_config(void) {
  const char* spec = getenv("FAKE_EDGETPU_UNPLUG");
  if (!spec) spec = "";
  if (strcmp(spec, unplug_spec) == 0) return;
  snprintf(unplug_spec, sizeof unplug_spec, "%s", spec);
  unplug_name[0] = 0;
  unplug_after_invokes = -1;
  unplug_absent = 0;
  __atomic_store_n(&unplug_state, 0, __ATOMIC_SEQ_CST);
  char buf[256];
  snprintf(buf, sizeof buf, "%s", spec);
  char* hash = strchr(buf, '#');
  if (hash) *hash = 0;
  char* at = strchr(buf, '@');
  if (!at) return;
  *at = 0;
  char* slash = strchr(at + 1, '/');
  unplug_after_invokes = atol(at + 1);
  unplug_absent = slash ? atol(slash + 1) : 0;
  snprintf(unplug_name, sizeof unplug_name, "%s", buf);
}

static int unplugged(const char* name) {
  return unplug_name[0] && strcmp(name, unplug_name) == 0 &&
         __atomic_load_n(&unplug_state, __ATOMIC_SEQ_CST) == 1;
}

struct edgetpu_device* edgetpu_list_devices(size_t* num_devices) {
  int types[kMaxDevices];
  int n = read_devices(types), usb = 0, pci = 0, kept = 0;
  char name[16];
  unplug_config();
  for (int i = 0; i < n; i++) {
    device_name(types, i, name, sizeof name);
    if (unplugged(name)) continue; /* gone from the bus until it re-enumerates */
    if (types[i] == 1) snprintf(paths[kept], sizeof paths[kept], "/sys/bus/usb/devices/fake-%d", usb++);
    else snprintf(paths[kept], sizeof paths[kept], "/dev/apex_%d", pci++);
    listed[kept].type = types[i];
    listed[kept].path = paths[kept];
    kept++;
  }
  *num_devices = (size_t)kept;
  return listed;
}

void edgetpu_free_devices(struct edgetpu_device* devices) { (void)devices; }

const char* edgetpu_version(void) {
  return "BuildLabel(COMPILER=edgeapp-stand-in,DATE=redacted,TIME=redacted),RuntimeVersion(14)";
}

/* ------------------------------------------------------------------------------ delegate */

typedef struct {
  TfLiteDelegate base; /* first: a TfLiteDelegate* is a Fake* */
  int device;
  char name[16];
  long fail_after; /* -1: never */
  long invokes;    /* by this delegate: a test's count does not depend on earlier tests */
  double delay_ms;
  double delay_step_ms;
  long unplug_after; /* -1: not the device to unplug, or already unplugged once */
} Fake;


static long fail_after_for(const char* name) {
  const char* spec = getenv("FAKE_EDGETPU_FAIL");
  char buf[512];
  if (!spec || !*spec) return -1;
  snprintf(buf, sizeof buf, "%s", spec);
  for (char* tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
    char* at = strchr(tok, '@');
    if (!at) continue;
    *at = 0;
    if (strcmp(tok, name) == 0) return atol(at + 1);
  }
  return -1;
}

static size_t element_size(int type) {
  switch (type) {
    case kTfLiteUInt8: case kTfLiteInt8: return 1;
    case kTfLiteInt16: return 2;
    case kTfLiteFloat32: case kTfLiteInt32: return 4;
    case kTfLiteInt64: return 8;
    default: return 0;
  }
}

static int layout_ok(const TfLiteTensor* t) {
  size_t elem = element_size(t->type), n = 1;
  if (elem == 0 || !t->dims) return 1; /* nothing to check against */
  for (int i = 0; i < t->dims->size; i++) n *= (size_t)t->dims->data[i];
  return n * elem == t->bytes;
}

static void* kernel_init(TfLiteContext* context, const char* buffer, size_t length) {
  (void)context; (void)length;
  return ((const TfLiteDelegateParams*)buffer)->delegate; /* user_data: the Fake */
}

static void kernel_free(TfLiteContext* context, void* data) { (void)context; (void)data; }

static TfLiteStatus kernel_prepare(TfLiteContext* context, TfLiteNode* node) {
  TfLiteIntArray* lists[2] = {node->inputs, node->outputs};
  for (int l = 0; l < 2; l++)
    for (int i = 0; i < lists[l]->size; i++) {
      int index = lists[l]->data[i];
      if (index < 0 || (size_t)index >= context->tensors_size || !layout_ok(&context->tensors[index])) {
        context->ReportError(context, "fake edgetpu: TfLiteTensor layout mismatch with this runtime");
        return 1;
      }
    }
  return 0;
}

static uint64_t next(uint64_t* s) {
  uint64_t x = *s;
  x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}

static TfLiteStatus kernel_invoke(TfLiteContext* context, TfLiteNode* node) {
  Fake* fake = (Fake*)node->user_data;
  long count = __atomic_fetch_add(&fake->invokes, 1, __ATOMIC_SEQ_CST);
  if (fake->fail_after >= 0 && count >= fake->fail_after) {
    context->ReportError(context, "fake edgetpu %s: device unplugged (failing on demand)", fake->name);
    return 1;
  }
  if (fake->unplug_after >= 0 && count >= fake->unplug_after) {
    int armed = 0;
    __atomic_compare_exchange_n(&unplug_state, &armed, 1, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    fake->unplug_after = -1;
  }
  if (unplugged(fake->name) || fake->unplug_after == -2) {
    fake->unplug_after = -2; /* this delegate's device is gone: it never works again */
    context->ReportError(context, "fake edgetpu %s: device unplugged (re-enumerating)", fake->name);
    return 1;
  }
  double delay = fake->delay_ms + fake->delay_step_ms * (double)count;
  if (delay > 0) {
    struct timespec ts = {(time_t)(delay / 1000.0),
                          (long)((delay - 1000.0 * (long)(delay / 1000.0)) * 1e6)};
    nanosleep(&ts, NULL);
  }
  uint64_t h = 1469598103934665603ULL; /* FNV-1a over every input byte, in input order */
  for (int i = 0; i < node->inputs->size; i++) {
    const TfLiteTensor* t = &context->tensors[node->inputs->data[i]];
    const unsigned char* p = (const unsigned char*)t->data;
    for (size_t k = 0; p && k < t->bytes; k++) { h ^= p[k]; h *= 1099511628211ULL; }
  }
  for (int o = 0; o < node->outputs->size; o++) {
    TfLiteTensor* t = &context->tensors[node->outputs->data[o]];
    uint64_t s = h ^ (0x9E3779B97F4A7C15ULL * (uint64_t)(o + 1));
    if (s == 0) s = 1;
    if (t->type == kTfLiteFloat32) {
      float* f = (float*)t->data;
      for (size_t k = 0; k < t->bytes / 4; k++) f[k] = (float)(next(&s) >> 40) / 16777216.0f;
    } else {
      unsigned char* p = (unsigned char*)t->data;
      for (size_t k = 0; k < t->bytes; k++) p[k] = (unsigned char)(next(&s) >> 56);
    }
  }
  return 0;
}

static TfLiteStatus delegate_prepare(TfLiteContext* context, TfLiteDelegate* delegate) {
  TfLiteIntArray* plan;
  if (context->GetExecutionPlan(context, &plan) != 0) return 1;
  TfLiteIntArray* nodes = malloc(sizeof(int) * (size_t)(plan->size + 1));
  nodes->size = 0;
  for (int i = 0; i < plan->size; i++) {
    TfLiteNode* node;
    TfLiteRegistration* reg;
    if (context->GetNodeAndRegistration(context, plan->data[i], &node, &reg) != 0) continue;
    if (reg->custom_name && strcmp(reg->custom_name, "edgetpu-custom-op") == 0)
      nodes->data[nodes->size++] = plan->data[i];
  }
  TfLiteStatus status = 0;
  if (nodes->size > 0) {
    TfLiteRegistration reg;
    memset(&reg, 0, sizeof reg);
    reg.init = kernel_init;
    reg.free = kernel_free;
    reg.prepare = kernel_prepare;
    reg.invoke = kernel_invoke;
    reg.builtin_code = kBuiltinDelegate;
    reg.custom_name = "fake-edgetpu";
    reg.version = 1;
    status = context->ReplaceNodeSubsetsWithDelegateKernels(context, reg, nodes, delegate);
  }
  free(nodes);
  return status;
}

static int valid_option(const char* key, const char* value) {
  if (strcmp(key, "Performance") == 0)
    return strcmp(value, "Low") == 0 || strcmp(value, "Medium") == 0 || strcmp(value, "High") == 0 ||
           strcmp(value, "Max") == 0;
  if (strcmp(key, "Usb.MaxBulkInQueueLength") == 0) {
    char* end;
    long n = strtol(value, &end, 10);
    return *value && !*end && n >= 0 && n <= 255;
  }
  return 1;
}

static void log_options(const char* device, char** keys, char** values, size_t n) {
  const char* path = getenv("FAKE_EDGETPU_OPTIONS");
  FILE* f = path ? fopen(path, "a") : NULL;
  if (!f) return;
  fprintf(f, "%s", device);
  for (size_t i = 0; i < n; i++) fprintf(f, " %s=%s", keys[i], values[i]);
  fprintf(f, "\n");
  fclose(f);
}

/* While the unplugged device is gone, opening it fails; each attempt counts down to its return. */
static int absent(const char* name) {
  if (!unplugged(name)) return 0;
  long left = __atomic_load_n(&unplug_absent, __ATOMIC_SEQ_CST);
  if (left == 0) {
    __atomic_store_n(&unplug_state, 2, __ATOMIC_SEQ_CST);
    return 0;
  }
  if (left > 0) __atomic_fetch_sub(&unplug_absent, 1, __ATOMIC_SEQ_CST);
  return 1;
}

void* tflite_plugin_create_delegate(char** keys, char** values, size_t n,
                                    void (*report)(const char*)) {
  const char* option = NULL;
  for (size_t i = 0; i < n; i++) {
    if (strcmp(keys[i], "device") == 0) option = values[i];
    if (!valid_option(keys[i], values[i])) {
      if (report) report("fake edgetpu: invalid option value");
      return NULL;
    }
  }
  int types[kMaxDevices];
  int count = read_devices(types);
  int device = resolve(option, types, count);
  char name[16] = "";
  unplug_config();
  if (device >= 0) device_name(types, device, name, sizeof name);
  if (device < 0 || absent(name)) {
    if (report) report("fake edgetpu: no such device");
    return NULL;
  }
  Fake* fake = calloc(1, sizeof(Fake));
  fake->base.data_ = fake;
  fake->base.Prepare = delegate_prepare;
  /* As libedgetpu does: without it the runtime prepares every op (the unresolved custom op
     included) before asking the delegate, and fails. */
  fake->base.flags = 1; /* kTfLiteDelegateFlagsAllowDynamicTensors */
  fake->device = device;
  snprintf(fake->name, sizeof fake->name, "%s", name);
  fake->fail_after = fail_after_for(fake->name);
  fake->unplug_after = (strcmp(name, unplug_name) == 0 &&
                        __atomic_load_n(&unplug_state, __ATOMIC_SEQ_CST) == 0) ? unplug_after_invokes : -1;
  const char* delay = getenv("FAKE_EDGETPU_DELAY_MS");
  fake->delay_ms = delay ? atof(delay) : 0.0;
  const char* step = getenv("FAKE_EDGETPU_DELAY_STEP_MS");
  fake->delay_step_ms = step ? atof(step) : 0.0;
  log_options(fake->name, keys, values, n);
  const char* log = getenv("FAKE_EDGETPU_LOG");
  FILE* f = log ? fopen(log, "a") : NULL;
  if (f) { fprintf(f, "create %s %d\n", fake->name, (int)getpid()); fclose(f); }
  return fake;
}

void tflite_plugin_destroy_delegate(void* delegate) { free(delegate); }
