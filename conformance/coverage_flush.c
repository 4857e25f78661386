/* Compiled into a plugin only by `fl-sdk test --coverage` (conformance/branch_coverage.py).
 * Kernel workers leave with _exit, which skips gcov's exit handler; the worker calls this
 * first so that the branches its kernels took are counted. */
void __gcov_dump(void);

__attribute__((visibility("default"))) void fl_coverage_flush(void) { __gcov_dump(); }
