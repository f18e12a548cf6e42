/* A stand-in for Google's edgetpu_compiler (x86-64 Linux), built by tests/compiler_standin.py
 * and laid out as Google's folder: edgetpu_compiler_bin/{edgetpu_compiler, ld-linux-x86-64.so.2,
 * libc.so.6}, run through that loader. It answers --version as the real compiler does and, for
 * a model, writes X_edgetpu.tflite (a copy) and X_edgetpu.log into --out_dir and prints what the
 * real compiler prints for a fully mapped model. STANDIN_WORK=N makes it hash the model N times
 * first: CPU work whose native-vs-emulated time scripts/arm64_chroot.sh reports. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef STANDIN_VERSION
#define STANDIN_VERSION "16.0.384591198"
#endif

static unsigned char *slurp(const char *path, long *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *data = malloc(*size > 0 ? *size : 1);
    if (fread(data, 1, *size, f) != (size_t)*size) { fclose(f); free(data); return NULL; }
    fclose(f);
    return data;
}

int main(int argc, char **argv) {
    const char *out_dir = ".", *model = NULL;
    int timeout = 180;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--version")) {
            printf("Edge TPU Compiler version %s\n", STANDIN_VERSION);
            return 0;
        } else if (!strcmp(argv[i], "--out_dir") && i + 1 < argc) {
            out_dir = argv[++i];
        } else if (!strcmp(argv[i], "--timeout_sec") && i + 1 < argc) {
            timeout = atoi(argv[++i]);
        } else if ((!strcmp(argv[i], "--min_runtime_version") || !strcmp(argv[i], "--num_segments") ||
                    !strcmp(argv[i], "--delegate_search_step")) && i + 1 < argc) {
            i++;
        } else if (argv[i][0] != '-') {
            model = argv[i];
        }
    }
    printf("Edge TPU Compiler version %s\n", STANDIN_VERSION);
    if (!model) { fprintf(stderr, "Invalid model: no model given\n"); return 1; }
    printf("Started a compilation timeout timer of %d seconds.\n", timeout);
    long size = 0;
    unsigned char *data = slurp(model, &size);
    if (!data) { printf("ERROR: Could not open '%s'.\n", model); return 1; }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned long long h = 1469598103934665603ULL;
    long work = getenv("STANDIN_WORK") ? atol(getenv("STANDIN_WORK")) : 0;
    for (long r = 0; r < work; r++)
        for (long j = 0; j < size; j++) h = (h ^ data[j]) * 1099511628211ULL;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;

    const char *base = strrchr(model, '/');
    base = base ? base + 1 : model;
    char stem[512];
    snprintf(stem, sizeof stem, "%s", base);
    char *dot = strrchr(stem, '.');
    if (dot) *dot = 0;
    char out_model[2048], out_log[2048];
    snprintf(out_model, sizeof out_model, "%s/%s_edgetpu.tflite", out_dir, stem);
    snprintf(out_log, sizeof out_log, "%s/%s_edgetpu.log", out_dir, stem);
    FILE *o = fopen(out_model, "wb");
    if (!o || fwrite(data, 1, size, o) != (size_t)size) { printf("ERROR: cannot write %s\n", out_model); return 1; }
    fclose(o);
    FILE *l = fopen(out_log, "w");
    if (!l) return 1;
    fprintf(l, "Edge TPU Compiler version %s\nInput: %s\nOutput: %s_edgetpu.tflite\n\n", STANDIN_VERSION, base, stem);
    fprintf(l, "Operator                       Count      Status\n\n");
    fprintf(l, "FULLY_CONNECTED                2          Mapped to Edge TPU\n");
    fclose(l);
    printf("\nModel compiled successfully in %ld ms.\n\n", ms);
    printf("Input model: %s\nInput size: %.2fKiB\n", model, size / 1024.0);
    printf("Output model: %s\nOutput size: %.2fKiB\n", out_model, size / 1024.0);
    printf("On-chip memory used for caching model parameters: %.2fKiB\n", size / 1024.0);
    printf("On-chip memory remaining for caching model parameters: 7.00MiB\n");
    printf("Off-chip memory used for streaming uncached model parameters: 0.00B\n");
    printf("Number of Edge TPU subgraphs: 1\nTotal number of operations: 2\n");
    printf("Operation log: %s\n\nOperator                       Count      Status\n\n", out_log);
    printf("FULLY_CONNECTED                2          Mapped to Edge TPU\n");
    printf("Compilation child process completed within timeout period.\nCompilation succeeded! (checksum %llx)\n", h);
    free(data);
    return 0;
}
