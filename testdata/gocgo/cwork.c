// c_work is the C half of gocgo's work: it calls back into Go.
#include <stdint.h>
#include "_cgo_export.h"

__attribute__((noinline)) int64_t c_work(int64_t x) { return goCallback(x) + 1; }
