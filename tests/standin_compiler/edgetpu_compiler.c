/* A stand-in for Google's edgetpu_compiler (x86-64 Linux), built by tests/compiler_standin.py
 * and laid out as Google's folder: edgetpu_compiler_bin/{edgetpu_compiler, ld-linux-x86-64.so.2,
 * libc.so.6}, run through that loader. It answers --version as the real compiler does and, for
 * a model, writes X_edgetpu.tflite (a copy) and X_edgetpu.log into --out_dir and prints what the
 * real compiler prints for a fully mapped model (several models: co-compiled, one block each). STANDIN_WORK=N makes it hash the model N times
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

static int compile_one(const char *model, const char *out_dir, long *ms_out, unsigned long long *h,
                       char *out_model, char *out_log, long *size) {
    unsigned char *data = slurp(model, size);
    if (!data) { printf("ERROR: Could not open '%s'.\n", model); return 1; }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long work = getenv("STANDIN_WORK") ? atol(getenv("STANDIN_WORK")) : 0;
    for (long r = 0; r < work; r++)
        for (long j = 0; j < *size; j++) *h = (*h ^ data[j]) * 1099511628211ULL;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *ms_out += (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    const char *base = strrchr(model, '/');
    base = base ? base + 1 : model;
    char stem[512];
    snprintf(stem, sizeof stem, "%s", base);
    char *dot = strrchr(stem, '.');
    if (dot) *dot = 0;
    snprintf(out_model, 2048, "%s/%s_edgetpu.tflite", out_dir, stem);
    snprintf(out_log, 2048, "%s/%s_edgetpu.log", out_dir, stem);
    FILE *o = fopen(out_model, "wb");
    if (!o || fwrite(data, 1, *size, o) != (size_t)*size) { printf("ERROR: cannot write %s\n", out_model); return 1; }
    fclose(o);
    free(data);
    FILE *l = fopen(out_log, "w");
    if (!l) return 1;
    fprintf(l, "Edge TPU Compiler version %s\nInput: %s\nOutput: %s_edgetpu.tflite\n\n", STANDIN_VERSION, base, stem);
    fprintf(l, "Operator                       Count      Status\n\n");
    fprintf(l, "FULLY_CONNECTED                2          Mapped to Edge TPU\n");
    fclose(l);
    return 0;
}

/* Several models are co-compiled as the real compiler does it: "Models compiled successfully",
 * then one block per model in the order given, the cache given to them in that order (7 MiB). */
int main(int argc, char **argv) {
    const char *out_dir = ".", *models[16];
    int n = 0, timeout = 180;
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
        } else if (argv[i][0] != '-' && n < 16) {
            models[n++] = argv[i];
        }
    }
    printf("Edge TPU Compiler version %s\n", STANDIN_VERSION);
    if (!n) { fprintf(stderr, "Invalid model: no model given\n"); return 1; }
    printf("Started a compilation timeout timer of %d seconds.\n", timeout);
    static char out_model[16][2048], out_log[16][2048];
    long sizes[16], ms = 0;
    unsigned long long h = 1469598103934665603ULL;
    for (int k = 0; k < n; k++)
        if (compile_one(models[k], out_dir, &ms, &h, out_model[k], out_log[k], &sizes[k])) return 1;
    printf("\n%s compiled successfully in %ld ms.\n", n > 1 ? "Models" : "Model", ms);
    double left = 7.0 * 1024 * 1024;
    for (int k = 0; k < n; k++) {
        double cached = sizes[k] < left ? sizes[k] : left;
        left -= cached;
        printf("\nInput model: %s\nInput size: %.2fKiB\n", models[k], sizes[k] / 1024.0);
        printf("Output model: %s\nOutput size: %.2fKiB\n", out_model[k], sizes[k] / 1024.0);
        printf("On-chip memory used for caching model parameters: %.2fKiB\n", cached / 1024.0);
        printf("On-chip memory remaining for caching model parameters: %.2fMiB\n", n > 1 ? left / 1048576.0 : 7.0);
        if (sizes[k] > cached)
            printf("Off-chip memory used for streaming uncached model parameters: %.2fKiB\n", (sizes[k] - cached) / 1024.0);
        else
            printf("Off-chip memory used for streaming uncached model parameters: 0.00B\n");
        printf("Number of Edge TPU subgraphs: 1\nTotal number of operations: 2\n");
        printf("Operation log: %s\n\nOperator                       Count      Status\n\n", out_log[k]);
        printf("FULLY_CONNECTED                2          Mapped to Edge TPU\n");
    }
    printf("Compilation child process completed within timeout period.\nCompilation succeeded! (checksum %llx)\n", h);
    return 0;
}
